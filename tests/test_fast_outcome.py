"""``fast.outcome``: what each error word means, decided in one place for every route.

Closed-form cases, one per kind of code: the table of ``decode``'s docstring, checked line by line.
"""

from __future__ import annotations

import pytest

from turnout.errors import KernelError, NonTerminationError
from turnout.fast.outcome import (
    MAX_CAPACITY,
    NONTERM,
    OK,
    Discard,
    ErrorCodes,
    Raise,
    Retry,
    decode,
    enforce,
    first,
    larger,
)


def _codes() -> tuple[ErrorCodes, dict[str, int]]:
    codes = ErrorCodes()
    got = {kind: codes.code(kind, f"{kind} message") for kind in ("kernel", "overflow", "underflow", "unrecorded")}
    codes.name_loop(3, "loop 3 ran out of iterations")
    got["nonterm"] = NONTERM + 3
    return codes, got


def test_each_kind_of_code_has_one_meaning() -> None:
    codes, c = _codes()
    assert decode(codes, 0, capacity=64, who="w") is OK
    assert decode(codes, c["overflow"], capacity=64, who="w") == Retry(128)
    assert decode(codes, c["underflow"], capacity=64, who="w", moved=2) == Retry(128)
    kernel = decode(codes, c["kernel"], capacity=64, who="w")
    assert isinstance(kernel, Raise) and type(kernel.error) is KernelError
    assert str(kernel.error) == "kernel message"
    nonterm = decode(codes, c["nonterm"], capacity=64, who="w")
    assert isinstance(nonterm, Raise) and type(nonterm.error) is NonTerminationError
    assert str(nonterm.error) == "loop 3 ran out of iterations"
    # an underflow with nothing moved out is a real error (a pop past what was pushed)
    under = decode(codes, c["underflow"], capacity=64, who="w")
    assert isinstance(under, Raise) and str(under.error) == "underflow message"


def test_an_attempt_is_discarded_where_a_stage_would_retry() -> None:
    codes, c = _codes()
    assert decode(codes, c["overflow"], capacity=64, who="w", attempt=True) == Discard()
    assert decode(codes, c["underflow"], capacity=64, who="w", attempt=True) == Discard()
    assert decode(codes, c["unrecorded"], capacity=64, who="w", attempt=True) == Discard(rerecord=True)
    assert isinstance(decode(codes, c["kernel"], capacity=64, who="w", attempt=True), Raise)


def test_stacks_past_the_cap_are_a_kernel_error_naming_the_route() -> None:
    assert larger(MAX_CAPACITY // 2, "fast backend") == Retry(MAX_CAPACITY)
    past = larger(MAX_CAPACITY, "fast backend")
    assert isinstance(past, Raise) and past.outgrown
    assert str(past.error) == f"fast backend: a gradient stack needs more than {MAX_CAPACITY} entries per chunk"
    spmd = larger(MAX_CAPACITY, "SPMD tier", unit="")
    assert isinstance(spmd, Raise)
    assert str(spmd.error) == f"SPMD tier: a gradient stack needs more than {MAX_CAPACITY} entries"


def test_outgrown_stacks_decide_among_several_words() -> None:
    codes, c = _codes()
    kernel = decode(codes, c["kernel"], capacity=64, who="w")
    retry = decode(codes, c["overflow"], capacity=64, who="w")
    assert first([kernel, retry]) == retry
    past = decode(codes, c["overflow"], capacity=MAX_CAPACITY, who="w")
    assert first([kernel, past]) is past
    assert first([kernel]) is kernel
    assert first([]) is OK


def test_enforce_raises_errors_and_nothing_else() -> None:
    """``enforce`` raises a ``Raise``'s error; a ``Retry`` or ``Discard`` is returned by every layer to
    the loop that acts on it, so one reaching ``enforce`` is a fault of ours."""
    enforce(OK)
    with pytest.raises(KernelError, match="boom"):
        enforce(Raise(KernelError("boom")))
    with pytest.raises(AssertionError):
        enforce(Retry(256))
    with pytest.raises(AssertionError):
        enforce(Discard())
