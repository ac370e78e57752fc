"""The lane of a plan's fused attempt: a repeated training step through a loop, written out.

Why a module of its own beside ``fast.lane`` (whose checks it shares): a fused attempt's repeat does
more than a ``Direct`` call's. It takes the gradient stacks the last run left on its rung of the
capacity ladder (donated to the call) and puts back the ones the call returns, reads the error word
and the fetches' live flags at once, writes back the Variables the plan assigns, and hands a run
whose stacks outgrew the rung back to the general path, which climbs the ladder. Written out for
the run's signature, that work cost the small RNN step's repeat about 25 µs around its compiled
call, where the backend's former route cost about 80 (``docs/benchmarks.rst``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Optional

import jax

from turnout.fast.guards import DEFAULT_BOUND, device_oom
from turnout.fast.lane import (
    BOUND_ARG,
    Lane,
    Signature,
    ahead_of_time,
    check_source,
    compile_lane,
    in_wide_mode,
    signature,
)
from turnout.fast.outcome import Raise
from turnout.fast.packing import Packing
from turnout.fast.plan import FusedResults
from turnout.fast.stacks import StackValue, kept_arrays
from turnout.fast.values import DEAD, start_reads, to_host
from turnout.fast.variable_store import Deferred, keep
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

    The lane, written out for this run (``_fused_lane_source``), takes the rung's stack buffers as
    the last run left them (donated to the call) and puts back the ones the call returns; reads the
    error word and live flags at once; writes back the Variables the plan assigns. A stack that
    outgrew the rung hands the run back (``None``: nothing was applied; the general path runs it again
    and climbs the ladder)."""
    sig = signature(backend, feeds, given)
    st = h.plan.fused
    stacks = backend._stack_bufs.get(id(h.plan))
    if sig is None or st is None or st.fns.get("seg") is None or stacks is None:
        return None
    layout, results = st.layout, st.results
    keys = [(t.node.id, t.index) for t, _, _, _ in sig]
    var_of = {vk: i for i, (_, vk) in enumerate(h.var_keys)}
    dev_vars = backend._dev_vars
    returned = set() if results is None else {*results.stacks, *results.ended}
    if (layout is None or results is None or any(k not in keys for k in layout.feeds)
            or any(k not in var_of for k in layout.state) or any(k not in stacks for k in layout.stacks)
            or any(k not in returned for k in h.plan.kept) or any(vk not in returned for _, vk in h.written)
            or any(name not in dev_vars for name in h.var_names)):
        return None  # (a run laid out otherwise than the stage's function: the general path's)
    call: Any
    bound: Any = DEFAULT_BOUND
    if h.wide or backend._deep_nesting:
        call = in_wide_mode(st.fns["seg"])
    else:  # the executable of the stage's last compilation, for these arguments (never traced again)
        by_key = {(t.node.id, t.index): v for t, v in feeds.items()}
        bufs = buffers_of(stacks)
        args = (*[by_key[k] for k in layout.feeds], *[dev_vars[h.var_keys[var_of[k]][0]][1] for k in layout.state],
                *[bufs[k] for k in layout.stacks], bound)
        call = ahead_of_time(st.fns["seg"], args, backend)
        if call is None:
            return None
        bound = jax.device_put(bound)
    env: dict[str, Any] = {
        "plan": h.plan, "top": h.top, "stage": st, "seg": st.fns["seg"], "pid": id(h.plan),
        "stack_bufs": backend._stack_bufs, "records": h.records, "stats": {**h.stats, "route": "lane"},
        "fetches": fetches, "live_keys": st.live_keys, "out_keys": results.out,
    }
    for i, (name, _) in enumerate(h.var_keys):
        env[f"w{i}"] = name
    for i, (name, _) in enumerate(h.written):
        env[f"u{i}"] = name
    for i, k in enumerate(h.plan.kept):
        env[f"p{i}"] = k
    for m, k in enumerate(layout.stacks):
        env[f"b{m}"] = k
    sources: list[tuple[str, Optional[int]]] = []  # per fetch: how its value is had, and its live flag
    if st.packed is not None:  # the flags come behind this fetched value (``fast.packing``)
        env["pk"], env["how"] = st.packed
    for i, t in enumerate(fetches):
        k = (t.node.id, t.index)
        live = st.live_keys.index(k) if k in st.live_keys else None
        if ops is not None and ops[i]:
            sources.append(("None", None))
        elif k in st.static_out:
            if st.static_out[k] is DEAD:
                return None  # (the general path raises its DeadFetchError)
            env[f"g{i}"] = st.static_out[k]
            sources.append((f"to_host(g{i})", None))
        elif st.packed is not None and k == st.packed[0]:
            sources.append(("pv", live))
        elif k in results.out:  # (an array is read back as it is; a TensorArray or a handle as ``to_host`` makes it)
            j = results.position(k)
            sources.append((f"asarray(res[{j}])" if k in st.array_out else f"to_host(res[{j}])", live))
        elif k in keys:  # a fed value fetched: it does not cross the call (``Stage.passthrough``)
            sources.append((f"to_host(v{keys.index(k)})", live))
        else:  # (not a result of the call: the general path's)
            return None
    # the fed values the call does not hand back, for the dead-fetch check (``backend._fetched``)
    fed = [j for j, k in enumerate(keys) if k not in results.out]
    for m, j in enumerate(fed):
        env[f"e{m}"] = keys[j]
    args_of = ([keys.index(k) for k in layout.feeds], [var_of[k] for k in layout.state], len(layout.stacks))
    source = _fused_lane_source(sig, args_of, results, len(h.var_keys), [results.position(vk) for _, vk in h.written],
                                [results.position(k) for k in h.plan.kept], sources, backend.overlap_reads,
                                None if st.packed is None else (results.position(st.packed[0]), st.packed[1]), fed)
    return compile_lane(backend, source, sig, call, bound, env, {
        "keep": keep, "to_host": to_host, "start_reads": start_reads, "StackValue": StackValue,
        "fused_failure": fused_failure, "JaxRuntimeError": jax.errors.JaxRuntimeError,
        "out_of_memory": out_of_memory, "buffers_of": buffers_of, "Deferred": Deferred})


def _fused_lane_source(sig: Signature, args_of: tuple[list[int], list[int], int], results: FusedResults, n_vars: int,
                       written: list[int], kept: list[int], sources: list[tuple[str, Optional[int]]], overlap: bool,
                       packed: Optional[tuple[int, Packing]] = None, fed: Sequence[int] = ()) -> str:
    """The text of a fused attempt's lane (``make_fused_lane``): the checks (``check_source``), then
    the attempt's call and its finish. The call takes its flat arguments (``Plan.fused_fn``) as
    ``args_of`` lays them out: the feeds (their places in ``sig``: ``v{j}``), the Variables (``r{i}``),
    the stacks (``b{m}`` the key of the ``m``-th, that many), then the bound; and returns its results
    flat (``res``, laid out as ``results`` says). Names: ``w{i}`` a Variable's name, ``u{i}`` a
    written Variable's (its new value at ``res[written[i]]``), ``p{i}`` a kept stack's key (its buffer
    at ``res[kept[i]]``); ``sources`` gives per fetch the expression of its value and the index of
    its live flag. ``packed``: where the flags ride behind a fetched output (``res[packed[0]]``,
    ``fast.packing``; ``how`` in the text), split as ``packing.unpack`` splits, written out; its value
    ``pv``. ``fed``: the places in ``sig`` of the fed values the call does not hand back (``e{m}`` the
    key of the ``m``-th), for the dead-fetch check, which looks every fetch up by key."""
    feeds, variables, n_stacks = args_of
    call_args = ("".join(f"v{j}, " for j in feeds) + "".join(f"r{i}[1], " for i in variables)
                 + "".join(f"stacks[b{m}], " for m in range(n_stacks)))
    fed_items = "".join(f"e{m}: v{j}, " for m, j in enumerate(fed))
    outs = results.outputs()
    at_out = f"res[{outs.start}:{outs.stop}]"
    names = ["graph", "version", "edits", "call", "pending", "bound", "backend", "plan", "top", "stage", "seg", "pid",
             "stack_bufs", "records", "stats", "fetches", "dev_vars", "live_keys", "out_keys"]
    names += ["pk", "how"] if packed is not None else []
    names += [f"t{i}, c{i}, d{i}, s{i}" for i in range(len(sig))] + [f"w{i}" for i in range(n_vars)]
    names += [f"u{i}" for i in range(len(written))] + [f"p{i}" for i in range(len(kept))]
    names += [f"b{m}" for m in range(n_stacks)] + [f"e{m}" for m in range(len(fed))]
    names += [f"g{i}" for i, (expr, _) in enumerate(sources) if expr.startswith("to_host(g")]
    head = ["def make(" + ", ".join(names) + "):",
            "    def lane(feed_dict, variables, run_bound=None):",
            "        nonlocal call, pending"]
    body = check_source(sig, n_vars)
    # the last run swapped or climbed, or the stage was traced again (``Plan.record_every_stack``: the
    # executable is not the stage's any more)
    body += ["        if top.predict_overflow or top.rung is not plan or stage.fns.get('seg') is not seg:",
             "            return None",
             "        stacks = stack_bufs.pop(pid, None)",
             "        if stacks is None:",  # released, or taken by a run that failed
             "            return None"]
    if kept:
        body += ["        if StackValue in map(type, stacks.values()):",  # kept by a staged run: buffers alone
                 "            stacks = buffers_of(stacks)"]
    body += ["        t_start = clock()",
             "        try:",
             "            res = call(" + call_args + BOUND_ARG + ")",
             "        except JaxRuntimeError as e:",
             "            out_of_memory(plan, stage, e)",
             "            raise",
             "        if pending:  # JAX made the executable's C++ entry point on this first call",
             "            call, pending = cpp_entry(call), False",
             "        stack_bufs[pid] = {" + "".join(f"p{i}: res[{j}], " for i, j in enumerate(kept)) + "}"]
    if overlap:
        body += [f"        start_reads({at_out})"]
    if packed is not None:  # (``packing.unpack`` written out: its call frame runs cold, about 1 µs)
        at, how = packed
        value = "a[0, ...]" if how.shape == () else f"a[:{how.size}].reshape({how.shape!r})"
        tail = f"a[{how.size}:]" + ("" if how.view is None else ".view(how.view)")
        body += [f"        a = asarray(res[{at}])", f"        pv = {value}", f"        code, *lives = {tail}.tolist()"]
    else:
        body += [f"        code, *lives = asarray(res[{outs.stop}]).tolist()"]
    body += ["        if code:",
             "            fused_failure(backend, plan, code)",
             "            return None"]  # a stack outgrew the rung: the general path climbs
    live = [j for _, j in sources if j is not None]
    if live:
        body += ["        if not (" + " and ".join(f"lives[{j}]" for j in live) + "):",
                 f"            backend._fetched(fetches, {{{fed_items}**dict(zip(out_keys, {at_out})), "
                 + ("pk: pv, " if packed is not None else "") + "**stage.static_out}, dict(zip(live_keys, lives)))"]
    body += ["        values = [" + "".join(f"{expr}, " for expr, _ in sources) + "]"]
    for i, j in enumerate(written):
        body += [f"        z{i} = res[{j}]"]
        if n_vars:  # (``variables`` is a DeviceVariables: checked above) its new value deferred, as ``keep`` does
            body += [f"        q{i} = slots[u{i}] = Deferred(z{i})", f"        dev_vars[u{i}] = (q{i}, z{i})"]
        else:
            body += [f"        dev_vars[u{i}] = (keep(variables, u{i}, z{i}), z{i})"]
    body += ["        backend._records = records",
             "        return values, stats, clock() - t_start", "    return lane"]
    return "\n".join(head + body) + "\n"


def buffers_of(stacks: dict[Any, Any]) -> dict[Any, Any]:
    """A plan's kept stacks as the fused stage takes them: value buffers alone (a staged run keeps
    ``StackValue`` records)."""
    return {k: kept_arrays(v)[0] if type(v) is StackValue else v for k, v in stacks.items()}


def fused_failure(backend: FastBackend, plan: Any, code: int) -> None:
    """After a fused lane's call set error word ``code``: its error raised, unless a stack outgrew
    the rung (``outcome.Discard``), which returns so that the lane hands the run back."""
    outcome = backend._decode(plan, code, attempt=True)
    if isinstance(outcome, Raise):
        raise outcome.error


def out_of_memory(plan: Any, stage: Any, e: Exception) -> None:
    """``e``, a fused lane's call failing, raised as ``device_oom`` raises it (a ``ResourceExhaustedError``
    naming the loops) when it is XLA's out-of-memory; other errors return and are raised as they are."""
    with device_oom(plan, stage):
        if "RESOURCE_EXHAUSTED" in str(e):
            raise e
