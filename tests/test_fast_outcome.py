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
    # a stack that ran empty with nothing moved out would run empty on any rung; after moves, a rung may mend it
    assert decode(codes, c["underflow"], capacity=64, who="w", attempt=True) == Discard(any_rung=True)
    assert decode(codes, c["underflow"], capacity=64, who="w", attempt=True, moved=2) == Discard()
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
    with pytest.raises(AssertionError, match=r"outcome Retry\(capacity=256\) reached a layer that can only raise"):
        enforce(Retry(256))
    with pytest.raises(AssertionError):
        enforce(Discard())


def test_the_cap_is_two_to_the_twenty_fourth_entries_worded_by_the_route() -> None:
    """The cap ``docs/fast_backend.rst`` states (2**24 entries), reached by doubling; past it the error
    names the route (``who``) and, by default, says the entries are per chunk."""
    assert MAX_CAPACITY == 1 << 24
    assert larger(1 << 23, "w") == Retry(1 << 24)
    assert isinstance(larger(1 << 24, "w"), Raise)
    codes, c = _codes()
    past = decode(codes, c["overflow"], capacity=MAX_CAPACITY, who="SPMD tier")
    assert isinstance(past, Raise) and past.outgrown
    assert str(past.error) == "SPMD tier: a gradient stack needs more than 16777216 entries per chunk"
    whole = decode(codes, c["underflow"], capacity=MAX_CAPACITY, who="fast backend", moved=1, unit="")
    assert isinstance(whole, Raise)
    assert str(whole.error) == "fast backend: a gradient stack needs more than 16777216 entries"


def test_an_attempt_outgrew_its_rung_only_past_its_capacity() -> None:
    """``mark``, the most entries the attempt's stacks held: a rung holds exactly its capacity, one
    more is a ``Discard`` that names how many the next rung must hold; a call that is not an attempt
    ignores it."""
    codes, _ = _codes()
    assert decode(codes, 0, capacity=4, who="w", attempt=True, mark=4) is OK
    assert decode(codes, 0, capacity=4, who="w", attempt=True, mark=5) == Discard(needed=5)
    assert decode(codes, 0, capacity=4, who="w", mark=5) is OK


def test_an_assert_that_shows_values_reports_them_through_its_code() -> None:
    """A check whose message depends on run-time values has them recorded on the host under its code
    (``ErrorCodes.detail``, called from the compiled program), and the decoded error is that text."""
    codes, c = _codes()
    codes.detail(c["kernel"], lambda v: f"kernel message: got {int(v)}", 7)
    got = decode(codes, c["kernel"], capacity=64, who="w")
    assert isinstance(got, Raise) and str(got.error) == "kernel message: got 7"
    again = decode(codes, c["kernel"], capacity=64, who="w")  # (a detail is the one run's: used once)
    assert isinstance(again, Raise) and str(again.error) == "kernel message"


def test_a_precompiled_first_attempt_is_discarded_once_and_later_runs_are_fused() -> None:
    """``precompile_staged``: the first run discards its fused attempt (``Discard()``, no refusal) so
    that the stages compile up front; the fused stage is not dropped, and every later run is one
    fused call that compiles nothing."""
    import numpy as np

    import turnout as tn

    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        _, y = tn.while_loop(lambda i, a: i < 5, lambda i, a: (i + 1, a * 1.1 + tn.sin(a)), [tn.constant(0), x])
        dx, = tn.gradients(y, [x])
    sess = tn.Session(g, backend="fast", options=tn.FastOptions(precompile_staged=True))
    want = tn.Session(g, backend="reference").run(dx, {x: 0.5})
    seen = []
    for _ in range(3):
        np.testing.assert_allclose(sess.run(dx, {x: 0.5}), want, rtol=1e-5)
        seen.append((sess.last_result.stats.get("fused"), sess.backend.compile_count))
    assert seen[0][0] is False and seen[1][0] is True and seen[2][0] in (True, None)
    assert seen[1][1] == seen[0][1] == seen[2][1]


def test_a_rung_holds_exactly_its_capacity() -> None:
    """A loop that pushes exactly the first rung's entries runs on that rung, not the next."""
    import numpy as np

    import turnout as tn

    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        n = tn.placeholder(tn.int32, [], name="n")
        _, y = tn.while_loop(lambda i, a: i < n, lambda i, a: (i + 1, a * 0.99 + tn.sin(a) * 0.01),
                             [tn.constant(0), x])
        dx, = tn.gradients(y, [x])
    sess = tn.Session(g, backend="fast", options=tn.FastOptions(stack_first_rung=16))
    for steps, rung in ((16, 16), (17, 20)):
        got = sess.run(dx, {x: 0.5, n: steps})
        np.testing.assert_allclose(got, tn.Session(g, backend="reference").run(dx, {x: 0.5, n: steps}), rtol=1e-5)
        stats = sess.last_result.stats
        assert stats["fused"] is True and stats["stack_capacity"] == rung, stats


def test_a_pop_past_every_push_is_the_interpreters_error_from_any_rung() -> None:
    """An attempt whose stack ran empty (``underflow``, nothing moved out) is discarded as one that
    would end so on every rung (``Discard.any_rung``): the stages run it at once and decide, raising
    the ``KernelError`` of the pop as the reference interpreter does. The attempt ran on the first of
    several rungs, and no rung above it is made or compiled only to learn the same."""
    import turnout as tn

    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")
        stack = g.create_node("StackNew", (), {"elem_dtype": "float32", "elem_shape": []}, name="stk").outputs[0]

        def push_body(i: tn.Tensor, h: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor]:
            p = g.create_node("StackPush", [stack, tn.reshape(i, [1]), tn.cast(i, tn.float32)], name="push").outputs[0]
            return i + 1, h + p * 0.0

        _, h = tn.while_loop(lambda i, h: i < n, push_body, [tn.constant(0), tn.constant(0.0)])
        with tn.control_dependencies([h]):
            top = n + 0

        def pop_body(j: tn.Tensor, s: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor]:
            popped = g.create_node("StackPop", [stack, tn.reshape(top - 1 - j, [1])], {"dtype": "float32"},
                                   name="pop").outputs[0]
            return j + 1, s + tn.reshape(popped, [])

        # one pop more than the pushes: the last reads index -1
        _, total = tn.while_loop(lambda j, s: j < n + 1, pop_body, [tn.constant(0), tn.constant(0.0)])
    with pytest.raises(KernelError, match="StackPop node .*pop"):
        tn.Session(g).run(total, {n: 3})
    sess = tn.Session(g, backend="fast", options=tn.FastOptions(stack_chunk=8, stack_first_rung=4))
    with pytest.raises(KernelError, match="StackPop node .*pop"):
        sess.run(total, {n: 3})
    plan = next(iter(sess.backend._plans.values()))
    assert len(plan.ladder) > 1  # (the attempt had rungs above it)
    assert sorted(plan.rungs) == plan.ladder[:1]  # (and climbed none of them)
