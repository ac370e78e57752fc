"""``fast.guards``: the run-time guards a compiled run keeps, read as rules.

Why a file of its own: the guards act where the test programs rarely go (an iteration bound of no
limit or past int32, a firing budget, a device out of memory), so each rule is checked directly, with
the words of the error it gives.
"""

from __future__ import annotations

import numpy as np
import pytest

import turnout as tn
from turnout.fast.guards import (
    DEFAULT_MAX_FIRINGS,
    asks_for_firings,
    device_oom,
    fused_oom,
    iteration_bound,
    refuse_firing_budget,
)
from turnout.fast.plan import INT32_MAX
from turnout.session import RunOptions

jax = pytest.importorskip("jax")


def test_the_iteration_bound_is_the_option_or_the_largest_int32() -> None:
    """No bound (None) and bounds past what int32 holds are the largest int32; any other is itself,
    as the int32 argument compiled loops compare their counters with."""
    for mi, want in ((None, INT32_MAX), (2**40, INT32_MAX), (INT32_MAX, INT32_MAX), (7, 7), (1, 1)):
        got = iteration_bound(RunOptions(max_iterations=mi))
        assert got == want and got.dtype == np.int32, (mi, got)


def test_only_a_firing_budget_of_the_users_own_is_refused() -> None:
    """Compiled code counts iterations, not firings: a ``max_firings`` the user set is refused by name
    (``UnsupportedError``), while none and the default (a guard the user did not choose) pass."""
    for firings, asked in ((None, False), (DEFAULT_MAX_FIRINGS, False), (1000, True), (DEFAULT_MAX_FIRINGS + 1, True)):
        options = RunOptions(max_firings=firings)
        assert asks_for_firings(options) is asked, firings
        if asked:
            with pytest.raises(tn.UnsupportedError) as err:
                refuse_firing_budget("the tier", options)
            assert str(err.value) == (f"the tier: RunOptions.max_firings={firings} cannot be honoured: compiled code "
                                      "counts loop iterations, not firings; bound loops with max_iterations (or run "
                                      "on backend='reference')")
        else:
            refuse_firing_budget("the tier", options)


def test_a_device_out_of_memory_is_a_resource_exhausted_error_naming_what_ran() -> None:
    """XLA's ``RESOURCE_EXHAUSTED`` in a compiled call becomes ``ResourceExhaustedError`` naming the
    route, the device and what ran (the fused call: the whole program), with XLA's first line and what
    to do; any other runtime error passes unchanged."""
    with pytest.raises(tn.ResourceExhaustedError) as e:
        with fused_oom("fast backend"):
            raise jax.errors.JaxRuntimeError("RESOURCE_EXHAUSTED: Out of memory allocating 123 bytes.\ndetails")
    assert str(e.value) == ("fast backend: the device ran out of memory running the whole program (its fused "
                            "call): RESOURCE_EXHAUSTED: Out of memory allocating 123 bytes.; run loops with "
                            "swap_memory=True to move full gradient stack chunks to host memory, or lower stack_chunk")
    with pytest.raises(tn.ResourceExhaustedError, match="^SPMD tier: cpu:1 ran out of memory running loop 'rnn'"):
        with device_oom("SPMD tier", "cpu:1", lambda: "loop 'rnn'"):
            raise jax.errors.JaxRuntimeError("RESOURCE_EXHAUSTED: no room")
    with pytest.raises(jax.errors.JaxRuntimeError, match="INTERNAL"):
        with fused_oom("fast backend"):
            raise jax.errors.JaxRuntimeError("INTERNAL: something else")
