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
  does the least a repeat needs, written out for the feeds of the run it repeats (``_lane_source``:
  one feed's checks after the other, no loop), and the session builds its ``RunResult`` only when
  ``last_result`` is read.

What a lane checks, so that it never runs what the general path would refuse or run otherwise: the
graph's ``version`` and ``edits`` are the ones it was built under (no validation is pending and no
plan is stale); the run's options are the defaults (the session looks for a lane only then);
the feeds are the same tensors, in the same order, as numpy arrays (or scalars) of exactly the
tensors' dtypes and of the shapes seen, so every check ``check_feed`` makes passed for this signature
and none depends on the values, or as Python numbers of the same type, which get the one check that
depends on the value (the session's ``_scalar_fits``: in range, finite where it must be) and are
converted as the session converts them, or as ``jax.Array`` values of exactly the tensors' dtypes
and shapes, still holding a value (not deleted or donated) on the backend's device; and each
Variable is still the host array the backend's device copy was made from. A fused attempt's lane
(``fast.fused_lane``) also needs the stack buffers the last run left on its rung, and hands a run
that outgrows them back. Anything else returns ``None`` and the session takes the general path, which checks
everything and may build a new lane. The allocation limit in force is not looked at: it is checked
when a program is traced, and a lane never traces.
"""

from __future__ import annotations

import hashlib
import linecache
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Optional

import jax
import numpy as np

from turnout.errors import DeadFetchError, dead_fetch_message
from turnout.fast.packing import Packing
from turnout.fast.values import start_reads
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
    ``None`` there."""
    sig = signature(backend, feeds, given)
    if sig is None:
        return None
    order = [(t.node.id, t.index) for t in feeds]
    if sorted(order) != sorted(d.feed_keys):
        return None
    perm = tuple(order.index(k) for k in d.feed_keys)
    var_names = d.var_names
    dev_vars = backend._dev_vars
    if any(name not in dev_vars for name in var_names):
        return None
    feed_vals = tuple(feeds[sig[i][0]] for i in perm)
    var_vals = tuple(dev_vars[name][1] for name in var_names)
    args = (feed_vals, var_vals, bound) if d.bounded else (feed_vals, var_vals)
    call: Any
    if holds_wide([t for t, _, _, _ in sig]) or backend._deep_nesting:
        call = in_wide_mode(d.fn)
    else:
        call = ahead_of_time(d.fn, args, backend)
        if call is None:  # no lane is not an error: the run already succeeded
            return None
        if d.bounded:  # on the device once: a numpy scalar argument is a transfer per call (about 4 µs)
            bound = jax.device_put(bound)
    return _lane(backend, d, fetches, sig, perm, bound, call, tuple(ops) if ops is not None else None)


#: per feed: its tensor, the Python type of its value, its dtype (for a Python number: the tensor's
#: dtype and the numpy type it converts to) and its shape (``None`` for a Python number)
Signature = tuple[tuple[Tensor, type[Any], Any, Optional[tuple[int, ...]]], ...]


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
        elif not isinstance(v, (np.ndarray, np.generic)) or v.dtype != t.dtype.numpy:
            return None
        sig.append((t, type(v), v.dtype, v.shape))
    return tuple(sig)


def _lane(backend: FastBackend, d: Direct, fetches: list[Tensor],
          sig: Signature, perm: tuple[int, ...], bound: Any,
          call: Any, ops: Optional[tuple[bool, ...]]) -> Lane:
    """The lane itself: a closure over everything the run it repeats fixed (see the module docstring),
    its code written for this run's feeds (``_lane_source``) and compiled by Python once."""
    env: dict[str, Any] = {"plan": d.plan, "fetches": fetches, "ops": ops, "stats": {**d.stats, "route": "lane"}}
    var_plan = variable_plan(d)
    for i, (name, _, _) in enumerate(var_plan):
        env[f"w{i}"] = name
    packed = d.aliases.get("packed")
    if packed is not None:
        env.update({"P": packed.index, "N": packed.size, "S": packed.shape, "V": packed.view})
    source = _lane_source(sig, perm, d.bounded, var_plan, len(fetches), ops is None and not backend.overlap_reads,
                          packed)
    return compile_lane(backend, source, sig, call, bound, env,
                        {"checked_values": checked_values, "Deferred": Deferred})


def compile_lane(backend: FastBackend, source: str, sig: Signature, call: Any, bound: Any, env: dict[str, Any],
                 scope: dict[str, Any]) -> Lane:
    """A lane's text (``source``, defining ``make``) compiled by Python once and made into the lane:
    ``make`` is given the route's own names (``env``) beside the ones every lane's text reads (the
    graph with its version and edits, the call and whether JAX has yet to build its C++ entry point,
    the bound, the backend and its Variables' device copies, each feed's ``t{i}, c{i}, d{i}, s{i}``
    of ``sig``), and the text sees the route's helpers (``scope``) beside the checks' own. Shared by
    ``make_lane`` and ``fast.fused_lane.make_fused_lane``."""
    graph = backend.graph
    env = {"graph": graph, "version": graph._version, "edits": graph._edits, "call": call,
           "pending": isinstance(call, jax.stages.Compiled), "bound": bound, "backend": backend,
           "dev_vars": backend._dev_vars, **env}
    for i, (t, kind, dtype, shape) in enumerate(sig):
        env.update({f"t{i}": t, f"c{i}": kind, f"d{i}": dtype, f"s{i}": shape})
    scope = {"asarray": np.asarray, "clock": time.perf_counter, "cpp_entry": cpp_entry, "fits": _scalar_fits,
             "DeviceVariables": DeviceVariables, "home": {backend._home}, **scope}
    filename = lane_filename(source)
    exec(compile(source, filename, "exec"), scope)  # our own text: no user value is in it
    lane: Any = scope["make"](**env)
    lane.version = env["version"]  # what ``Repeats.lane`` reuses it under
    lane.ahead_of_time = isinstance(call, jax.stages.Compiled)  # (else the jitted function, in 64-bit mode)
    return lane  # type: ignore[no-any-return]


def lane_filename(source: str) -> str:
    """The file name a lane's text is compiled under, registered with ``linecache`` so that a
    traceback through a lane shows its lines (a generated function is otherwise a frame without
    source). Named by the text's digest: two lanes of one text share one entry, and the entries stay
    as few as the distinct lanes a process makes."""
    name = f"<turnout.fast.lane {hashlib.sha1(source.encode('utf-8')).hexdigest()[:12]}>"
    linecache.cache[name] = (len(source), None, source.splitlines(keepends=True), name)
    return name


def check_source(sig: Signature, n_vars: int) -> list[str]:
    """The lines every lane starts with, each returning ``None`` (the general path) on a mismatch: the
    graph unchanged since the lane was made; the feeds (``feed_dict``) those of signature ``sig``
    (per feed: tensor ``t{i}``, Python type ``c{i}``, dtype ``d{i}``, shape ``s{i}``; a shape of
    ``None`` marks a Python number, which is range-checked and converted into ``v{i}``; a
    ``jax.Array`` must still hold a value, on the backend's device, ``home``); and each of
    the ``n_vars`` Variables (``w{i}``) still the session's entry its device copy was made from
    (``r{i}``: that record)."""
    n = len(sig)
    body = ["        if graph._version != version or graph._edits != edits:",
            "            return None"]
    if n == 0:
        body += ["        if feed_dict is not None and (type(feed_dict) is not dict or feed_dict):",
                 "            return None"]
    else:
        body += [f"        if type(feed_dict) is not dict or len(feed_dict) != {n}:", "            return None",
                 "        " + "".join(f"(k{i}, v{i}), " for i in range(n)) + "= feed_dict.items()"]
        for i, (_, kind, _, shape) in enumerate(sig):
            test = f"k{i} is not t{i} or type(v{i}) is not c{i}"
            if shape is not None and not issubclass(kind, _FIXED_SCALARS):
                test += f" or (v{i}.dtype is not d{i} and v{i}.dtype != d{i}) or v{i}.shape != s{i}"
            if issubclass(kind, jax.Array):  # still holding a value, on the backend's device
                test += f" or v{i}.is_deleted() or v{i}.devices() != home"
            body += [f"        if {test}:", "            return None"]
            if shape is None:  # a Python number: the per-value check ``Session._check_feed`` makes
                if kind is not bool:
                    body += [f"        if not fits(d{i}[0], v{i}):", "            return None"]
                body += [f"        v{i} = d{i}[1](v{i})"]
    if n_vars:  # each Variable still the entry its device copy was made from (a store the backend gave)
        body += ["        if type(variables) is not DeviceVariables:", "            return None",
                 "        slots = variables._slots"]
        for i in range(n_vars):
            body += [f"        r{i} = dev_vars.get(w{i})",
                     f"        if r{i} is None or r{i}[0] is not slots.get(w{i}):", "            return None"]
    return body


#: the iteration bound a lane's call takes: its own (the default options'), or the run's
BOUND_ARG = "bound if run_bound is None else run_bound"

#: numpy scalar types whose dtype is fixed by the type: for them the type is the whole feed check
_FIXED_SCALARS = (np.number, np.bool_)


def _lane_source(sig: Signature, perm: tuple[int, ...], bounded: bool,
                 var_plan: tuple[tuple[str, bool, Optional[int]], ...], n_fetches: int, plain_reads: bool,
                 packed: Optional[Packing] = None) -> str:
    """The text of a ``Direct`` run's lane for feeds of signature ``sig`` (its checks:
    ``check_source``). With ``packed`` the call's flags come behind fetch ``P`` (``fast.packing``):
    the lane reads that one array and splits it (the value, the first ``N`` elements in shape ``S``;
    the flags, the tail read as ``V``).

    Why text: each line between two compiled calls runs cold (see the module docstring), and a loop
    over the feeds that unpacks their expected signature cost 1 to 1.5 µs a feed there; the same
    checks written out, one feed after the other, cost a third of that. The checks are the general
    lane's, unrolled: the feed's tensor by identity, its type, then its dtype and shape for an array
    (a numpy scalar of a number type needs no more than its type: its dtype and shape are made anew
    on each access), or the range of a Python number, converted as the session converts it."""
    n = len(sig)
    head = ["def make(graph, version, edits, call, pending, bound, backend, plan, fetches, ops, stats, dev_vars,",
            "         " + "".join(f"t{i}, c{i}, d{i}, s{i}, " for i in range(n))
            + "".join(f"w{i}, " for i in range(len(var_plan))) + ("P, N, S, V, " if packed else "") + "):",
            "    def lane(feed_dict, variables, run_bound=None):",
            "        nonlocal call, pending"]
    body = check_source(sig, len(var_plan))
    feed_vals = "(" + "".join(f"v{i}, " for i in perm) + ")"
    var_vals = "(" + "".join(f"r{i}[1], " for i in range(len(var_plan))) + ")"
    args = f"{feed_vals}, {var_vals}, {BOUND_ARG}" if bounded else f"{feed_vals}, {var_vals}"
    body += ["        t_start = clock()",
             f"        vals, flags, var_out = call({args})",
             "        if pending:  # JAX made the executable's C++ entry point on this first call",
             "            call, pending = cpp_entry(call), False"]
    if packed is not None:  # one array holds a value and the flags: read it, split it
        tail = "a[N:]" if packed.view is None else "a[N:].view(V)"
        mixed = "(" + "".join("u, " if i == packed.index else f"vals[{i}], " for i in range(n_fetches)) + ")"
        body += ["        a = asarray(vals[P])",  # (a scalar's view as ``a[0, ...]``: a third of a reshape's cost)
                 "        u = a[0, ...]" if packed.shape == () else "        u = a[:N].reshape(S)"]
        if plain_reads:
            reads = "[" + "".join("u, " if i == packed.index else f"asarray(vals[{i}]), "
                                  for i in range(n_fetches)) + "]"
            body += [f"        code, *lives = {tail}.tolist()",
                     f"        values = ({reads} if not code and all(lives)",
                     "                  else checked_values(backend, plan, fetches, "
                     f"{mixed}, asarray([code, *lives]), ops))"]
        else:
            body += [f"        values = checked_values(backend, plan, fetches, {mixed}, {tail}, ops)"]
    elif plain_reads:  # no fetched op, reads not overlapped: the common run read back without a call
        reads = "[" + "".join(f"asarray(vals[{i}]), " for i in range(n_fetches)) + "]"
        body += ["        if flags is None:",
                 f"            values = {reads}",
                 "        else:",
                 "            code, *lives = asarray(flags).tolist()",
                 f"            values = ({reads} if not code and all(lives)",
                 "                      else checked_values(backend, plan, fetches, vals, flags, ops))"]
    else:
        body += ["        values = checked_values(backend, plan, fetches, vals, flags, ops)"]
    for i, (_, written, j) in enumerate(var_plan):  # as ``write_variables`` writes them, written out
        if j is not None:  # fetched too: its host value is read back already
            body += [f"        slots[w{i}] = values[{j}]"] if written else []
            body += [f"        dev_vars[w{i}] = (slots.get(w{i}), vals[{j}])"]
        elif written:  # deferred until read (``fast.variable_store``)
            body += [f"        slots[w{i}] = e{i} = Deferred(var_out[{i}])",
                     f"        dev_vars[w{i}] = (e{i}, var_out[{i}])"]
        else:
            body += [f"        dev_vars[w{i}] = (r{i}[0], var_out[{i}])"]
    body += ["        return values, stats, clock() - t_start", "    return lane"]
    return "\n".join(head + body) + "\n"


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


def checked_values(backend: FastBackend, plan: Any, fetches: list[Tensor], vals: tuple[Any, ...],
                   flags: Any, ops: Optional[tuple[bool, ...]] = None) -> list[Any]:
    """The fetched values of a ``Direct`` call on the host (``None`` for the fetches ``ops`` marks,
    which are not read back). With its error word and live flags (``flags``; ``None`` when tracing
    showed that no check can fail and every fetch is live, see ``Plan.direct_fn``): the error raised
    (``KernelError``, ``NonTerminationError``) and a dead fetch refused first. Shared by the lane and
    ``FastBackend._direct_result``."""
    if backend.overlap_reads:
        start_reads(vals if ops is None else [v for v, op in zip(vals, ops) if not op])
    if flags is None:
        if ops is None:
            return list(map(np.asarray, vals))  # (map: no comprehension frame, about 1 µs a run)
        return [None if op else np.asarray(v) for op, v in zip(ops, vals, strict=True)]
    code, *lives = np.asarray(flags).tolist()  # one read-back, then Python ints
    if code:
        backend._raise_errors(plan, {"err": code}, 0)
    if ops is None and all(lives):  # every fetch live and none an op: the common run, without the loop
        return list(map(np.asarray, vals))
    values: list[Any] = []
    skip = ops if ops is not None else (False,) * len(fetches)
    for t, v, live, op in zip(fetches, vals, lives, skip, strict=True):
        if not live:
            raise DeadFetchError(dead_fetch_message(t.name, t.node))
        values.append(None if op else np.asarray(v))
    return values


def variable_plan(d: Direct) -> tuple[tuple[str, bool, Optional[int]], ...]:
    """Per Variable of ``d``: its name, whether the call writes it, and the index of the fetch that
    holds its new value (``None``: the call returns it separately), as ``write_variables`` reads them."""
    alias = d.aliases.get("vars") or (None,) * len(d.var_names)
    return tuple(zip(d.var_names, d.written, alias, strict=True))


def write_variables(var_plan: tuple[tuple[str, bool, Optional[int]], ...], var_out: Any, vals: Any,
                    values: list[Any], variables: dict[str, np.ndarray], dev_vars: dict[str, tuple[Any, Any]]) -> None:
    """After a ``Direct`` call: each written Variable's new value into the session's store (deferred
    there, see ``fast.variable_store``), and every Variable's device copy (``dev_vars``) with the
    store's entry it stands for. A new value that
    is also a fetched one is returned once (``Plan.direct_fn``) and taken from the fetched values.
    Shared by the lane and ``FastBackend._direct_result``."""
    peek = peeker(variables)
    for (name, w, j), dev in zip(var_plan, var_out, strict=True):
        if j is not None:  # fetched too: its host value is read back already
            dev = vals[j]
            if w:
                put_fetched(variables, name, values[j])
            slot = peek(name)
        else:
            slot = keep(variables, name, dev) if w else peek(name)
        dev_vars[name] = (slot, dev)
