"""The repeated-run lane: a ``Session.run`` that repeats a ``Direct`` run, or a plan's fused attempt
(a training step through a loop, ``fast.fused_lane``), costs the compiled call.

Why a lane of its own: a small program run many times (an actor's step, a serving call) is made of
its fixed cost. Measured on the development machine, the jitted call of ``x * 2 + 1`` takes 13 to
15 µs, and the hot path of ``FastBackend.run`` added about 25 µs around it. Two things made those
25 µs, and neither shows when the pieces are timed alone:

- **64-bit mode.** The backend traces under ``jax.enable_x64(True)``, so it must call its jitted
  functions inside that context too (outside it, JAX would trace them again for 32-bit mode). Inside
  the context JAX's own dispatch of a call is 7 to 10 µs slower. An ahead-of-time ``Compiled``
  executable is bound to its argument types instead, and called outside the context it costs what
  the user's own ``jax.jit`` call costs. It cannot take 64-bit numpy arrays outside the context
  (JAX would narrow them first), so a lane whose feeds hold one calls the jitted function inside it.
- **Python around a compiled call runs cold.** The call evicts the interpreter's caches, so every
  line between two calls costs three to five times what it costs in a tight loop: building the hot
  key, the feed and Variable lists, the stats dict and the ``RunResult`` added about 10 µs. The lane
  does the least a repeat needs, written out for the feeds of the run it repeats (``fast.lane_text``:
  one feed's checks after the other, no loop), and the session builds its ``RunResult`` only when
  ``last_result`` is read.

What a lane checks, so that it never runs what the general path would refuse or run otherwise: the
graph's ``version`` and ``edits`` are the ones it was built under (no validation is pending and no
plan is stale); the run's options are the defaults (the session looks for a lane only then);
the feeds are the same tensors, in the same order, as numpy arrays (or scalars) of exactly the
tensors' dtypes and of the shapes seen, so every check ``check_feed`` makes passed for this signature
and none depends on the values (but a feed the plan is specialised on, ``fast.specialise``, which
must hold the value the plan took as a constant), or as Python numbers of the same type, which get
the one check that depends on the value (the session's ``_scalar_fits``: in range, finite where it
must be) and are converted as the session converts them, or as ``jax.Array`` values of exactly the tensors' dtypes
and shapes, still holding a value (not deleted or donated) on the backend's device; and each
Variable is still the host array the backend's device copy was made from. A fused attempt's lane
(``fast.fused_lane``) also needs the stack buffers the last run left on its rung, and hands a run
that outgrows them back. Anything else returns ``None`` and the session takes the general path, which checks
everything and may build a new lane. The allocation limit in force is not looked at: it is checked
when a program is traced, and a lane never traces.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Optional

import jax
import numpy as np

from turnout.errors import DeadFetchError, dead_fetch_message
from turnout.fast.call_spec import CallSpec
from turnout.fast.emit import var_key
from turnout.fast.lane_text import LaneCall, Signature, lane_filename, lane_text, sources_of
from turnout.fast.outcome import Raise
from turnout.fast.regions import Key
from turnout.fast.values import start_reads, to_host
from turnout.fast.variable_store import Deferred, DeviceVariables, keep, peeker, put_fetched
from turnout.graph import Tensor
from turnout.session import _scalar_fits

if TYPE_CHECKING:
    from turnout.fast.backend import FastBackend
    from turnout.fast.plan import Direct

#: what a lane returns: the fetched values, the stats of the run without its time, and its seconds
LaneResult = tuple[list[Any], dict[str, Any], float]
#: ``lane(feed_dict, variables, run_bound=None)``: ``run_bound`` is the iteration bound of the run's
#: options when the backend calls it for a run with other options (``None``: the default bound)
Lane = Callable[..., Optional[LaneResult]]


def make_lane(backend: FastBackend, d: Direct, fetches: list[Tensor], feeds: dict[Tensor, Any],
              given: dict[Any, Any], bound: Any, ops: Optional[list[bool]] = None) -> Optional[Lane]:
    """The lane of the ``Direct`` run just made with ``fetches`` and ``feeds`` (as the session checked
    and converted them, from ``given``, the user's feed dict), or ``None`` when a repeat of it could
    not skip the general path's work: a feed whose value needs the session's full checks
    (``signature``), the feeds not covering the plan's. ``bound`` is the compiled loops' iteration
    bound of the default options; ``ops`` marks the fetches that stand for ops (the session fetches
    them as ``None``): their values are not read back, and the lane's ``RunResult.values`` holds
    ``None`` there. Its text: ``fast.lane_text``, from the call's ``CallSpec``."""
    sig = signature(backend, feeds, given)
    spec = d.spec
    if sig is None or spec is None:
        return None
    order = [(t.node.id, t.index) for t in feeds]
    if sorted(order) != sorted(spec.args.feeds):
        return None
    dev_vars = backend._dev_vars
    if any(name not in dev_vars for name in d.var_names):
        return None
    at = tuple(order.index(k) for k in spec.args.feeds)
    var_of = {var_key(name): i for i, name in enumerate(d.var_names)}
    args = (*[feeds[sig[i][0]] for i in at], *[dev_vars[name][1] for name in d.var_names])
    call: Any
    if holds_wide([t for t, _, _, _ in sig]) or backend._deep_nesting:
        call = in_wide_mode(d.fn)
    else:
        call = ahead_of_time(d.fn, (*args, bound) if spec.args.bounded else args, backend)
        if call is None:  # no lane is not an error: the run already succeeded
            return None
        if spec.args.bounded:  # on the device once: a numpy scalar argument is a transfer per call (about 4 µs)
            bound = jax.device_put(bound)
    env: dict[str, Any] = {"plan": d.plan, "stats": {**d.stats, "route": "lane"}}
    lc = describe(spec, sig, fetches, tuple(ops) if ops is not None else None, d.var_names,
                  [var_of[k] for k in spec.args.state], backend.overlap_reads, env, d.plan.static_feeds)
    return None if lc is None else compile_lane(backend, lc, fetches, call, bound, env, {})


def describe(spec: CallSpec, sig: Signature, fetches: list[Tensor], ops: Optional[tuple[bool, ...]],
             var_names: tuple[str, ...], state: list[int], overlap: bool, env: dict[str, Any],
             static: Mapping[Key, np.ndarray], attempt: bool = False, kept: tuple[int, ...] = ()
             ) -> Optional[LaneCall]:
    """What a lane's text is written from (``LaneCall``), shared by both routes: where each fetch's
    value comes from (``sources_of``; its static values go into ``env``), which Variables take a
    new value from which result (every Variable of ``var_names`` is checked, ``w{i}`` in ``env``),
    and which feeds must hold the values ``static`` that the call's plan is specialised on
    (``e{i}`` in ``env``). ``None`` when a fetch is not had from the call, or a value the plan is
    specialised on is not a feed the lane can compare on the host (a tensor computed by an earlier
    run, a ``jax.Array``)."""
    keys = [(t.node.id, t.index) for t, _, _, _ in sig]
    sources = sources_of(spec, fetches, keys, ops, env)
    if sources is None:
        return None
    fixed = tuple(sorted(keys.index(k) for k in static if k in keys))
    if len(fixed) != len(static) or any(issubclass(sig[i][1], jax.Array) for i in fixed):
        return None
    for i in fixed:
        env[f"e{i}"] = static[keys[i]]
        if sig[i][3] is None and issubclass(sig[i][1], int):  # (``lane_text.check_source``)
            env[f"x{i}"] = np.asarray(static[keys[i]]).item()
    if spec.packed is not None:
        env["how"] = spec.packed[1]
    aliases = dict(spec.aliases)
    stores = []
    for i, name in enumerate(var_names):
        env[f"w{i}"] = name
        k = var_key(name)
        if spec.returns(k):
            host = next((f for f, t in enumerate(fetches) if aliases.get(k) == (t.node.id, t.index)
                         and sources[f][0].startswith("asarray(")), None)
            stores.append((i, spec.position(k), host))
    return LaneCall(spec, sig, tuple(keys.index(k) for k in spec.args.feeds), len(var_names), tuple(state),
                    tuple(stores), sources, attempt, kept, overlap, fixed)


def signature(backend: FastBackend, feeds: dict[Tensor, Any], given: dict[Any, Any]) -> Optional[Signature]:
    """The feed signature a lane checks its feeds against (``check_source``), or ``None`` when a feed
    needs the session's full checks on each run: a value that is neither a Python number, nor a numpy
    array or scalar of exactly its tensor's dtype, nor a ``jax.Array`` of that dtype on the backend's
    device (which the session passes as it is, ``FastBackend.device_feed``). Also ``None`` while the
    graph awaits validation."""
    if backend.graph.version != backend._checked_version or len(given) != len(feeds):
        return None
    sig: list[tuple[Tensor, type[Any], Any, Optional[tuple[int, ...]]]] = []
    for t in feeds:
        v = given.get(t)
        if type(v) in (int, float, bool):  # converted per run, as ``Session._check_feed`` does
            sig.append((t, type(v), (t.dtype, np.dtype(t.dtype.numpy).type), None))
            continue
        if isinstance(v, jax.Array):  # passed as it is, on the backend's device (``device_feed``)
            if v.dtype != t.dtype.numpy or t.dtype.is_opaque or backend.device_feed(v) is not v:
                return None
        elif not (type(v) is np.ndarray or isinstance(v, np.generic)) or v.dtype != t.dtype.numpy:
            return None
        sig.append((t, type(v), v.dtype, v.shape))
    return tuple(sig)


def compile_lane(backend: FastBackend, lc: LaneCall, fetches: list[Tensor], call: Any, bound: Any,
                 env: dict[str, Any], scope: dict[str, Any]) -> Lane:
    """A lane's text (``lane_text`` of ``lc``) compiled by Python once and made into the lane: ``make``
    is given the route's own names (``env``) beside the ones every lane's text reads (the graph with
    its version and edits, the call and whether JAX has yet to build its C++ entry point, the bound,
    the backend and its Variables' device copies, the fetches, each feed's ``t{i}, c{i}, d{i}, s{i}``
    of ``lc.sig``), and the text sees the route's helpers (``scope``) beside the ones every lane uses.
    Shared by ``make_lane`` and ``fast.fused_lane.make_fused_lane``."""
    graph = backend.graph
    env = {"graph": graph, "version": graph._version, "edits": graph._edits, "call": call,
           "pending": isinstance(call, jax.stages.Compiled), "bound": bound, "backend": backend,
           "dev_vars": backend._dev_vars, "fetches": fetches, **env}
    for i, (t, kind, dtype, shape) in enumerate(lc.sig):
        env.update({f"t{i}": t, f"c{i}": kind, f"d{i}": dtype, f"s{i}": shape})
    scope = {"asarray": np.asarray, "array_equal": np.array_equal, "clock": time.perf_counter,
             "cpp_entry": cpp_entry, "fits": _scalar_fits, "DeviceVariables": DeviceVariables,
             "home": {backend._home}, "to_host": to_host, "start_reads": start_reads, "Deferred": Deferred,
             "fail": lane_failure, "refuse_dead": refuse_dead, **scope}
    source = lane_text(lc, list(env))
    exec(compile(source, lane_filename(source), "exec"), scope)  # our own text: no user value is in it
    lane: Any = scope["make"](**env)
    lane.version = env["version"]  # what ``Repeats.lane`` reuses it under
    lane.ahead_of_time = isinstance(call, jax.stages.Compiled)  # (else the jitted function, in 64-bit mode)
    return lane  # type: ignore[no-any-return]


def in_wide_mode(fn: Any) -> Callable[..., Any]:
    """``fn`` (a jitted function) called in 64-bit mode, the mode it was traced in: a lane's call where
    there is no ahead-of-time executable (64-bit feeds, which JAX would narrow outside the mode, or
    a program nested deeply enough that lowering it again would need a large stack)."""
    def call(*a: Any) -> Any:
        with jax.enable_x64(True):
            return fn(*a)
    return call


def holds_wide(tensors: list[Tensor]) -> bool:
    """Whether a fed tensor holds 64-bit values: outside 64-bit mode JAX would narrow a numpy array of
    them before an ahead-of-time executable sees it, so a call fed one stays the jitted function,
    called in that mode."""
    return any(np.dtype(t.dtype.numpy).itemsize > 4 for t in tensors)


def ahead_of_time(fn: Any, args: tuple[Any, ...], backend: FastBackend) -> Optional[jax.stages.Compiled]:
    """The ahead-of-time executable of the jitted ``fn`` (traced in 64-bit mode) for ``args``, taken
    from the compilation its own run already made; ``None`` when lowering fails, or would trace again
    (then it is not the executable that ran: ``backend.compile_count`` counts traces). Shared by the
    lane and the backend's hot fused route (``fast.repeat.HotFused.executable``)."""
    before = backend.compile_count
    try:
        with jax.enable_x64(True):
            compiled = fn.lower(*args).compile()
    except Exception:  # noqa: BLE001 - the caller keeps the jitted function's route
        return None
    return compiled if backend.compile_count == before else None


def cpp_entry(compiled: Any) -> Any:
    """The C++ function an ahead-of-time ``Compiled`` executable calls through once it has run (JAX
    builds it on the first call), or the ``Compiled`` itself where there is none.

    Why: ``Compiled.__call__`` is a Python method in front of that function, and on the development
    machine it costs 1.5 to 2 µs a call: a tenth of a small program's whole run. The entry point takes
    the same arguments and raises the same errors; it is found by name, so a JAX without it falls
    back to the public call."""
    entry = getattr(compiled, "_call", None)
    return entry if callable(entry) else compiled


def lane_failure(backend: FastBackend, plan: Any, code: int, attempt: bool, mark: int = 0) -> None:
    """After a lane's call set error word ``code`` (or, for an ``attempt``, its stacks' high-water
    mark ``mark`` passed its rung): its error raised (``outcome.decode``), else (a stack that outgrew
    the attempt's rung) a return, and the lane hands the run back."""
    outcome = backend._decode(plan, code, attempt=attempt, mark=mark)
    if isinstance(outcome, Raise):
        raise outcome.error


def refuse_dead(fetches: list[Tensor], lives: tuple[Any, ...]) -> None:
    """``DeadFetchError`` for the first fetch whose live flag (``lives``, one per fetch) is 0."""
    for t, live in zip(fetches, lives, strict=True):
        if not live:
            raise DeadFetchError(dead_fetch_message(t.name, t.node))


def write_variables(var_plan: tuple[tuple[str, bool, Optional[int]], ...], var_out: Any, values: list[Any],
                    variables: dict[str, np.ndarray], dev_vars: dict[str, tuple[Any, Any]]) -> None:
    """After a run: per Variable of ``var_plan`` (its name, whether the run gave it a new value, the
    index of the fetch that holds that value or ``None``), its new value into the session's store
    (deferred there, see ``fast.variable_store``; a fetched one as its host value, ``values``, which is
    read back already), and every Variable's device copy (``var_out``) into ``dev_vars`` with the
    store's entry it stands for. The general path's write-back (a lane writes the same, written out)."""
    peek = peeker(variables)
    for (name, w, j), dev in zip(var_plan, var_out, strict=True):
        if w and j is not None:
            put_fetched(variables, name, values[j])
            slot = peek(name)
        else:
            slot = keep(variables, name, dev) if w else peek(name)
        dev_vars[name] = (slot, dev)
