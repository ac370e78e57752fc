"""What a compiled call's error word means, and what its caller does next: one decoder.

A compiled call cannot raise, so it returns an int32 *error word*: 0 when every check held, else the
code of the first check that failed. The codes are given out while the program is traced
(``ErrorCodes``: one table per compiled plan, so a code read back names the op that failed); codes
from ``NONTERM`` up name a light loop that ran out of iterations.

Every route that calls compiled code (the one-device backend's stages, its fused attempt and Direct
call, their lanes, the partitioned executor, the SPMD tier) reads the word the same way: ``decode``
turns it into an *outcome*, a value saying what to do next:

- ``Ok``: every check held;
- ``Retry(capacity)``: a gradient stack outgrew its chunk: run again with ``capacity`` entries;
- ``Discard``: an attempt (the fused stage) cannot finish the run at its capacity: the caller runs the
  stages instead, re-recording every stack first where ``rerecord`` says so, and dropping the fused
  stage for good where its trace ``refused`` (made by the backend's fused call, not by ``decode``);
- ``Raise(error)``: the error the interpreters raise for the same mistake (``KernelError``,
  ``NonTerminationError``), or the ``KernelError`` saying that the stacks need more than
  ``MAX_CAPACITY`` entries.

Why one decoder: each route used to read the word itself, and a kind handled on one route and not on
another raised a different error for the same program. No outcome but ``Raise`` is raised: every
layer returns a ``Retry`` or ``Discard`` to the loop that acts on it (the one-device backend's stages
and its chunk driver, ``driven.drive_chunks``; in the partitioned executor, a run keeps the first
``Retry`` a segment, a driven loop or an iteration's error words gave it, ``PlanRun.retry``, and the
host's conds and loops stop at it). ``enforce`` raises the error of a ``Raise``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Union

import numpy as np

from turnout.errors import KernelError, NonTerminationError, TurnoutError

#: Error word values from ``NONTERM`` up say that a light loop (``Emitter.run_light_while``) ran out
#: of iterations: ``NONTERM + number`` names the loop by its ``regions.loop_number`` once the word has
#: left every loop; inside a loop's body the number is counted from that loop's (``Emitter.frames``).
#: Codes of the ``ErrorCodes`` table stay far below it.
NONTERM = 1 << 24

#: the most entries per chunk a gradient stack may grow to (on every route) before outgrowing it is
#: an error
MAX_CAPACITY = 1 << 24

#: error kinds that discard an attempt instead of being raised: a stack outgrew (or underflowed) the
#: attempt's capacity, or a positional stack was pushed away from its position
DISCARDED = frozenset({"overflow", "underflow", "unrecorded"})


class ErrorCodes:
    """Error word codes -> (kind, message). Shared by every trace of one compiled plan, so a code
    read back after a run names the op that failed. Kinds: ``kernel``, ``nonterm``, ``overflow``,
    ``underflow``, and ``unrecorded`` (a positional stack pushed away from its position: never raised,
    the fused attempt runs again with index records, see ``plan.positional_stacks``). Codes below
    ``NONTERM`` index a table of (kind, message); codes from it up name a light loop that ran out of
    iterations (``loops``)."""

    def __init__(self) -> None:
        self.entries: list[tuple[str, str]] = []
        self._index: dict[tuple[str, str], int] = {}
        #: loop number -> message, for the codes from ``NONTERM`` up
        self.loops: dict[int, str] = {}
        #: code -> the full message of its failure in the run being decoded, where the message shows
        #: run-time values (``detail``); taken by ``decode``
        self.details: dict[int, str] = {}

    def code(self, kind: str, message: str) -> int:
        """The code of a check of ``kind`` failing with ``message`` (the same code for the same pair)."""
        k = (kind, message)
        if k not in self._index:
            self.entries.append(k)
            self._index[k] = len(self.entries)
        return self._index[k]

    def name_loop(self, number: int, message: str) -> None:
        """The message of the nonterm code ``NONTERM + number``."""
        self.loops[number] = message

    def detail(self, code: int, text: Callable[..., str], *values: Any) -> None:
        """Called from a compiled program (a host callback) when the check of ``code`` is the run's
        first failure: its full message, ``text`` of the values it shows (``EmitterCore.check``)."""
        self.details[code] = text(*[np.asarray(v) for v in values])

    def lookup(self, code: int) -> tuple[str, str]:
        """The (kind, message) of a nonzero code."""
        if code >= NONTERM:
            return "nonterm", self.loops[code - NONTERM]
        return self.entries[code - 1]


@dataclass(frozen=True)
class Ok:
    """Every check of the call held."""


@dataclass(frozen=True)
class Retry:
    """A gradient stack outgrew its chunk: run again, from the start, with ``capacity`` entries."""

    capacity: int


@dataclass(frozen=True)
class Discard:
    """An attempt cannot finish the run at its capacity: nothing of it is kept, and the caller runs the
    stages. ``rerecord``: a positional stack was pushed away from its position, so every stack of
    the plan records its indices from now on (``FastBackend._record_every_stack``). ``refused``: why
    the attempt could not even be traced at this capacity (a lowering the fused stage cannot make, a
    counted stack longer than the rung, ``counted_stacks.RungTooSmall``), so the plan drops it for
    good; empty for an attempt that ran. Why a value: *dropping the fused stage* is the caller's
    decision, not the program's refusal, which ``UnsupportedError`` raised further means (a run on
    the interpreter). ``needed``: the stacks held more entries than the rung has (they count on past
    it, ``Emitter.push_limit``), this many. ``any_rung``: the attempt would end the same on every
    rung (a stack ran empty with nothing moved out, a fault of the program that no capacity mends),
    so the stages run it now and decide, and no rung above is compiled only to learn that."""

    rerecord: bool = False
    refused: str = ""
    #: the entries the attempt's stacks counted past its capacity (their high-water mark): the rung
    #: that holds the run; 0 where the attempt did not outgrow its rung
    needed: int = 0
    any_rung: bool = False


@dataclass(frozen=True)
class Raise:
    """The run fails with ``error``, the one the interpreters raise for the same mistake.
    ``outgrown``: the error is that the stacks need more than ``MAX_CAPACITY`` entries (``larger``)."""

    error: TurnoutError
    outgrown: bool = False


Outcome = Union[Ok, Retry, Discard, Raise]
OK = Ok()


def larger(capacity: int, who: str, unit: str = " per chunk") -> Union[Retry, Raise]:
    """The outcome of stacks that outgrew ``capacity``: twice the room, or, past ``MAX_CAPACITY``, the
    ``KernelError`` naming ``who`` (the route: ``"fast backend"``, ``"SPMD tier"``...)."""
    if capacity * 2 > MAX_CAPACITY:
        return Raise(KernelError(f"{who}: a gradient stack needs more than {MAX_CAPACITY} entries{unit}"), True)
    return Retry(capacity * 2)


def decode(codes: ErrorCodes, code: int, *, capacity: int, who: str, moved: int = 0, attempt: bool = False,
           unit: str = " per chunk", mark: int = 0) -> Outcome:
    """What error word ``code`` of a call of the plan whose table is ``codes`` means.

    ``capacity``: the entries per chunk the call's stacks had; ``moved``: stack chunks moved out of
    the device during the run (a stack that ran empty after that is short of what was moved, not
    wrong); ``attempt``: the call was a fused attempt, which a stack outgrowing it discards instead of
    retrying. ``who`` and ``unit`` word the error of stacks past ``MAX_CAPACITY`` (``larger``).
    ``mark``: the most entries the attempt's stacks held (``Emitter.note_mark``): past ``capacity``,
    the attempt outgrew its rung whatever its word says (a pop past the capacity reads an entry the
    push did not write, and may set the word).

    As plain Python::

        if attempt and mark > capacity: return Discard(needed=mark)
        if code == 0: return Ok()
        kind, message = codes.lookup(code)
        if attempt and kind in DISCARDED:
            return Discard(rerecord=kind == "unrecorded", any_rung=kind == "underflow" and not moved)
        if kind == "overflow" or (kind == "underflow" and moved): return larger(capacity, who)
        return Raise(NonTerminationError(message) if kind == "nonterm" else KernelError(message))
    """
    if attempt and mark > capacity:
        return Discard(needed=mark)
    if not code:
        return OK
    kind, message = codes.lookup(code)
    message = codes.details.pop(code, message)  # (the values a failed Assert shows)
    if attempt and kind in DISCARDED:  # (an underflow with nothing moved out: no rung mends it)
        return Discard(rerecord=kind == "unrecorded", any_rung=kind == "underflow" and not moved)
    # A nested loop's stack outgrew its chunk (overflow), or was swapped out at a point its backward
    # loop could not refill (underflow after moves): run again with a larger capacity.
    if kind == "overflow" or (kind == "underflow" and moved):
        return larger(capacity, who, unit)
    if kind == "nonterm":
        return Raise(NonTerminationError(message))
    return Raise(KernelError(message))


def first(outcomes: Sequence[Outcome]) -> Outcome:
    """The outcome of a call with several error words (one per device, in code order): stacks that
    outgrew their buffer on any device decide (a ``Retry``, or past ``MAX_CAPACITY`` its error), else
    the first word's outcome; ``Ok`` for none."""
    for o in outcomes:
        if isinstance(o, Retry) or (isinstance(o, Raise) and o.outgrown):
            return o
    return outcomes[0] if outcomes else OK


def enforce(outcome: Outcome) -> None:
    """Act on an outcome that can only be ``Ok`` or ``Raise``: nothing, or its error raised (the run
    fails, as on the interpreters). A ``Retry`` or a ``Discard`` is returned by every layer up to the
    loop that acts on it (the one that sizes the stacks, or the fused attempt's caller): reaching here
    it is a fault of ours."""
    if isinstance(outcome, Ok):
        return
    if isinstance(outcome, Raise):
        raise outcome.error
    raise AssertionError(f"outcome {outcome!r} reached a layer that can only raise errors")


__all__ = ["DISCARDED", "MAX_CAPACITY", "NONTERM", "OK", "Discard", "ErrorCodes", "Ok", "Outcome", "Raise", "Retry",
           "decode", "enforce", "first", "larger"]
