"""Checkpoint schedules: reverse a loop of unknown length in a fixed number of saved states.

Reverse-mode differentiation of a loop needs the loop's states in reverse order: the state before the
last step first, the initial state last. Storing every state costs memory proportional to the trip
count ``n``, which a ``while_loop`` knows only when it ends. This module decides, in pure Python, which
states to keep in ``slots`` fixed places and which to recompute, so that any number of iterations is
reversed within those slots. ``turnout.jax.while_loop`` runs exactly this schedule inside one compiled
JAX program; the functions here report its costs so that docs and planners can state them.
(These are checkpoints of *loop states* for differentiation; ``turnout.checkpoint`` saves Variables to
files, which is another thing.)

The schedule has two halves that share one stack of slots.

*Forward (online thinning).* The forward loop does not know ``n``. It keeps the state before step
``i`` whenever ``i`` is a multiple of a stride ``s`` (at first 1). When its slots are full and
another state is due, it drops every other kept state (those at odd multiples of ``s``) and doubles
``s``. At any time the kept states are those at ``0, s, 2s, ...``, so at most ``slots`` are held, and
after the first thinning about half the slots or more are in use: segments between kept states are
at most about ``2n / slots`` steps long. After the first thinning the forward loop leaves one slot
free (``capacity``), which the backward loop needs to reverse the last segment in good time.

*Backward (binomial reversal of the top segment).* Once the forward loop ends ``n`` is known. The
slots form a stack whose top holds the start of the last segment not yet reversed, ``[start, end)``.
With ``c`` slots from the top one upwards (the top's own included), the backward loop either

- *pushes*: when ``c >= 2`` and the segment has two steps or more, it recomputes ``m`` steps from the
  top state (``m`` from ``split``, revolve's binomial rule) and pushes the state at ``start + m``; or
- *reverses one step*: otherwise it recomputes ``end - 1 - start`` steps from the top state to reach
  the state before the last step, applies the step's vector-Jacobian product, and lowers ``end`` by
  one; when ``end`` meets ``start`` it pops the top slot.

Every step is reversed exactly once, in reverse order, and the stack never holds more than ``slots``
states (``replay`` checks both, and the property tests run it on random lengths and slot counts).
With ``slots >= n`` nothing is recomputed. With few slots a step is recomputed at most ``r`` times,
where ``r`` is the least integer with ``C(c + r, c) >= L`` for a segment of length ``L`` and ``c``
slots (Griewank's binomial bound): for about ``sqrt(2n)`` slots that is about one extra forward
pass; for ``log2(n)`` slots the work is O(n log n) in O(log n) memory.

Its meaning as a plain Python loop (``actions`` yields exactly these steps)::

    stack = forward_checkpoints(n, slots)   # the positions the forward loop kept
    end = n
    while end > 0:
        start, c = stack[-1], slots - len(stack) + 1
        if c >= 2 and end - start >= 2:
            stack.append(start + split(end - start, c))          # recompute, then push
        else:
            # recompute end - 1 - start steps, then reverse step end - 1
            end -= 1
            if end == start:
                stack.pop()
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

#: Binomials saturate here in ``split`` so that the compiled version (int32 arithmetic) gives the same
#: split as this module; segments longer than half of it are split as if they had ``SPLIT_CAP // 2``
#: steps (still correct, only the recompute cost is no longer optimal).
SPLIT_CAP = 2**30


def slots_for_budget(memory_budget: int, bytes_per_state: int) -> int:
    """How many loop states a budget of ``memory_budget`` bytes holds (``bytes_per_state`` each,
    bookkeeping included). Zero means the budget cannot hold even one state: the caller must refuse it,
    because a loop cannot be reversed without its initial state."""
    if bytes_per_state <= 0:
        raise ValueError(f"bytes_per_state must be positive, got {bytes_per_state}")
    return max(0, memory_budget) // bytes_per_state


def forward_checkpoints(n: int, slots: int) -> tuple[list[int], int]:
    """(positions kept, final stride) after a forward loop of ``n`` steps with ``slots`` slots.

    Position ``i`` is the state before step ``i`` (so ``0`` is the initial state). This is the online
    half: it is computed step by step without knowing ``n``, exactly as the forward loop does.
    """
    _check(n, slots)
    kept: list[int] = []
    stride = 1
    for i in range(n):
        while i % stride == 0 and len(kept) >= capacity(slots, stride):
            kept = kept[::2]
            stride *= 2
        if i % stride == 0:
            kept.append(i)
    return kept, stride


def capacity(slots: int, stride: int) -> int:
    """How many states the forward loop keeps before it thins: every slot until the first thinning (so a
    loop that fits is never recomputed), then one fewer, so that the backward loop always has a free slot
    for the last segment and never reverses a whole segment by recomputing it from its start."""
    return slots if stride == 1 or slots == 1 else slots - 1


def split(length: int, slots: int) -> int:
    """How many steps to recompute before pushing a state, for a segment of ``length >= 2`` steps with
    ``slots >= 2`` slots (its start's included): revolve's binomial rule.

    Why this rule: with ``c`` slots and at most ``r`` recomputations of any step, at most
    ``beta(c, r) = C(c + r, c)`` steps can be reversed, and ``beta(c, r) = beta(c - 1, r) + beta(c, r - 1)``
    (the right part keeps ``c - 1`` slots, the left part one recomputation fewer). So with ``r`` the
    least such that ``beta(c, r) >= length``, any push between ``length - beta(c - 1, r)`` and
    ``beta(c, r - 1)`` keeps both parts within their bounds; of those, the one nearest
    ``beta(c, r - 2)`` recomputes the fewest steps in all (the tests check it against a dynamic programme
    over every split). The arithmetic saturates at ``SPLIT_CAP`` exactly as the compiled version's
    int32 arithmetic does.
    """
    if length < 2 or slots < 2:
        raise ValueError(f"split needs length >= 2 and slots >= 2, got length={length}, slots={slots}")
    length = min(length, SPLIT_CAP // 2)
    beta, beta1, beta2, r = 1, 0, 0, 0  # beta(c, r), beta(c, r - 1), beta(c, r - 2)
    while beta < length:
        beta2, beta1, beta = beta1, beta, min(SPLIT_CAP, beta * (slots + r + 1) // (r + 1))
        r += 1
    return min(length - 1, max(1, length - (beta - beta1), beta2))


@dataclass(frozen=True)
class Action:
    """One step of the backward loop. ``kind`` is ``"push"`` (recompute ``advance`` steps from the
    state at ``start``, then keep the state at ``start + advance``) or ``"reverse"`` (recompute
    ``advance`` steps from ``start``, then apply the vector-Jacobian product of step
    ``start + advance``); ``depth`` is the number of slots in use after the action."""

    kind: str
    start: int
    advance: int
    depth: int


def actions(n: int, slots: int, kept: list[int] | None = None) -> Iterator[Action]:
    """The backward loop's actions for ``n`` steps, starting from the forward loop's ``kept`` positions
    (``forward_checkpoints`` by default; ``[0]`` gives the offline binomial schedule of a loop whose
    forward pass kept only its initial state)."""
    _check(n, slots)
    stack = list(forward_checkpoints(n, slots)[0] if kept is None else kept)
    end = n
    while end > 0:
        start, free = stack[-1], slots - len(stack) + 1
        if free >= 2 and end - start >= 2:
            m = split(end - start, free)
            stack.append(start + m)
            yield Action("push", start, m, len(stack))
        else:
            end -= 1
            if end == start:
                stack.pop()
            yield Action("reverse", start, end - start, len(stack))


@dataclass(frozen=True)
class Cost:
    """What a schedule costs for ``n`` steps in ``slots`` slots.

    ``peak_states``: the most states held at once (never more than ``slots``); ``recomputed``: forward
    steps the backward loop runs again (zero when every state fits); ``body_calls``: every evaluation
    of the loop body in a forward-and-backward pass (``n`` forward, ``recomputed``, and ``n`` inside the
    vector-Jacobian products); ``overhead``: ``recomputed / n``, the extra forward passes.
    """

    n: int
    slots: int
    peak_states: int
    recomputed: int
    body_calls: int

    @property
    def overhead(self) -> float:
        """``recomputed / n``: the extra forward passes the schedule costs (0.0 for ``n = 0``)."""
        return self.recomputed / self.n if self.n else 0.0


def cost(n: int, slots: int, kept: list[int] | None = None) -> Cost:
    """The cost of reversing ``n`` steps in ``slots`` slots (the thinning forward loop's checkpoints
    unless ``kept`` is given). Computed by running the schedule, so it is exact, in O(n log n) time."""
    forward = forward_checkpoints(n, slots)[0] if kept is None else kept
    peak, recomputed = len(forward), 0
    for a in actions(n, slots, kept):
        peak = max(peak, a.depth)
        recomputed += a.advance
    return Cost(n, slots, peak, recomputed, 2 * n + recomputed)


def repetition_bound(n: int, slots: int) -> int:
    """The least ``r`` with ``C(slots + r, slots) >= n``: Griewank's bound on how often the offline
    binomial schedule (``kept=[0]``) recomputes any one step. For ``slots`` about ``sqrt(2n)`` it is
    2; for ``slots`` about ``log2(n)`` it is about ``log2(n)`` too."""
    _check(n, slots)
    r = 0
    while math.comb(slots + r, slots) < n:
        r += 1
    return r


def replay(n: int, slots: int, kept: list[int] | None = None) -> list[int]:
    """Run the schedule on stand-in states (the state before step ``i`` is ``i``) and return the steps in
    the order they were reversed. Raises ``AssertionError`` if a slot held the wrong state, a
    recomputation started from a state not held, or more than ``slots`` states were held; the property
    tests check that the result is ``[n - 1, ..., 0]``."""
    kept = forward_checkpoints(n, slots)[0] if kept is None else kept
    assert len(kept) <= slots and (n == 0 or kept[:1] == [0]), kept
    stack = [(p, p) for p in kept]  # (position, the state held there)
    out = []
    for a in actions(n, slots, kept):
        position, state = stack[-1]
        assert (position, state) == (a.start, a.start), (a, stack[-1])
        for _ in range(a.advance):
            state += 1  # one step of the body
        if a.kind == "push":
            stack.append((a.start + a.advance, state))
            assert len(stack) <= slots, (a, len(stack))
        else:
            out.append(state)  # the vector-Jacobian product of step ``state`` at the state before it
            if state == position:
                stack.pop()
        assert len(stack) == a.depth, (a, len(stack))
    return out


def _check(n: int, slots: int) -> None:
    if n < 0:
        raise ValueError(f"a trip count is never negative, got {n}")
    if slots < 1:
        raise ValueError(f"a schedule needs at least one slot (for the initial state), got {slots}")
