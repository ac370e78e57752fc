"""The lane of a plan's fused attempt: a repeated training step through a loop, written out.

Why a module of its own beside ``fast.lane`` (whose text generator, ``fast.lane_text``, it shares):
a fused attempt's repeat does more than a ``Direct`` call's. It takes the gradient stacks the last
run left on its rung of the capacity ladder (donated to the call) and puts back the ones the call
returns, reads the error word and the fetches' live flags at once, writes back the Variables the
plan assigns, and hands a run whose stacks outgrew the rung back to the general path, which climbs
the ladder. Written out for the run's signature, that work cost the small RNN step's repeat about 25
µs around its compiled call, where the backend's former route cost about 80
(``docs/benchmarks.rst``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

import jax

from turnout.fast.guards import DEFAULT_BOUND, fused_oom
from turnout.fast.lane import Lane, ahead_of_time, compile_lane, describe, in_wide_mode, signature
from turnout.fast.run_state import WHO
from turnout.fast.stacks import StackValue, kept_arrays
from turnout.graph import Tensor

if TYPE_CHECKING:
    from turnout.fast.backend import FastBackend
    from turnout.fast.repeat import HotFused


def make_fused_lane(backend: FastBackend, h: HotFused, fetches: list[Tensor], feeds: dict[Tensor, Any],
                    given: dict[Any, Any], ops: Optional[list[bool]] = None) -> Optional[Lane]:
    """The lane of a plan's fused attempt that a run just took or recorded (``h``: its route), or
    ``None`` where a repeat could not skip the general path's work: the feed signatures
    ``make_lane`` takes (``signature``), the rung's stack buffers still kept, every Variable's device
    copy made. It calls the stage's ahead-of-time executable (made from the jitted function's last
    compilation, never traced again), or the jitted function in 64-bit mode for 64-bit feeds or a
    deeply nested program (``in_wide_mode``). Why a lane for it: a training step through a loop is
    such a plan, and the Python of the backend's former route around its compiled call cost as much
    as the call for a small step (about 80 µs against 95 for ``run_overhead``'s
    ``rnn_training_step``).

    The lane, written out for this run (``fast.lane_text.lane_text``), takes the rung's stack buffers as
    the last run left them (donated to the call) and puts back the ones the call returns; reads the
    error word and live flags at once; writes back the Variables the plan assigns. A stack that
    outgrew the rung hands the run back (``None``: nothing was applied; the general path runs it again
    and climbs the ladder)."""
    sig = signature(backend, feeds, given)
    st = h.plan.fused
    stacks = backend._stack_bufs.get(id(h.plan))
    if sig is None or st is None or st.fns.get("seg") is None or stacks is None or st.spec is None:
        return None
    spec = st.spec
    a = spec.args
    keys = [(t.node.id, t.index) for t, _, _, _ in sig]
    var_of = {vk: i for i, (_, vk) in enumerate(h.var_keys)}
    dev_vars = backend._dev_vars
    if (any(k not in keys for k in a.feeds) or any(k not in var_of for k in a.state)
            or any(k not in stacks for k in a.stacks) or any(not spec.returns(k) for k in h.plan.kept)
            or any(name not in dev_vars for name in h.var_names)):
        return None  # (a run laid out otherwise than the stage's function: the general path's)
    call: Any
    bound: Any = DEFAULT_BOUND
    if h.wide or backend._deep_nesting:
        call = in_wide_mode(st.fns["seg"])
    else:  # the executable of the stage's last compilation, for these arguments (never traced again)
        by_key = {(t.node.id, t.index): v for t, v in feeds.items()}
        state = {k: dev_vars[h.var_keys[i][0]][1] for k, i in var_of.items()}
        call = ahead_of_time(st.fns["seg"], a.flat(by_key, state, buffers_of(stacks), bound), backend)
        if call is None:
            return None
        bound = jax.device_put(bound)
    env: dict[str, Any] = {
        "plan": h.plan, "top": h.top, "stage": st, "seg": st.fns["seg"], "pid": id(h.plan),
        "stack_bufs": backend._stack_bufs, "records": h.records, "stats": {**h.stats, "route": "lane"},
        "marks": h.top.marks, "recent": h.top.marks.recent if h.top.marks is not None else None,
        "cap": h.plan.capacity, "lower": max((c for c in h.top.ladder or () if c < h.plan.capacity), default=0),
    }
    for i, k in enumerate(h.plan.kept):
        env[f"p{i}"] = k
    for m, k in enumerate(a.stacks):
        env[f"b{m}"] = k
    lc = describe(spec, sig, fetches, tuple(ops) if ops is not None else None, h.var_names,
                  [var_of[k] for k in a.state], backend.overlap_reads, env, h.plan.static_feeds, attempt=True,
                  kept=tuple(spec.position(k) for k in h.plan.kept))
    if lc is None:
        return None
    return compile_lane(backend, lc, fetches, call, bound, env, {
        "StackValue": StackValue, "JaxRuntimeError": jax.errors.JaxRuntimeError, "out_of_memory": out_of_memory,
        "buffers_of": buffers_of})


def buffers_of(stacks: dict[Any, Any]) -> dict[Any, Any]:
    """A plan's kept stacks as the fused stage takes them: value buffers alone (a staged run keeps
    ``StackValue`` records)."""
    return {k: kept_arrays(v)[0] if type(v) is StackValue else v for k, v in stacks.items()}


def out_of_memory(plan: Any, e: Exception) -> None:
    """``e``, a fused lane's call failing, raised as ``fused_oom`` raises it (a ``ResourceExhaustedError``
    naming the loops) when it is XLA's out-of-memory; other errors return and are raised as they are."""
    with fused_oom(WHO):
        if "RESOURCE_EXHAUSTED" in str(e):
            raise e
