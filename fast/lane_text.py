"""The one generator of a lane's source text, from a call's ``CallSpec`` and the run's feed signature.

Why a module of its own: a lane (``fast.lane``) repeats a compiled call — a ``Direct`` call or a
plan's fused attempt — with the least Python a repeat needs, written out for the run it repeats. Both
routes call a function of one calling convention (``fast.call_spec``), so one text builder writes
both lanes, parametrised by what the spec says (stacks taken and given back, a bound, flags apart or
behind an output or none, Variables written) and by what the route adds (``LaneCall.attempt``: the
fused attempt's stack buffers and its hand-back of a run that outgrew them).

Why text: each line between two compiled calls runs cold (see ``fast.lane``), and a loop over the
feeds that unpacks their expected signature cost 1 to 1.5 µs a feed there; the same checks written
out, one feed after the other, cost a third of that. Every lane first checks everything its run
fixed and returns ``None`` — the general path — before it touches any state when anything differs.
The text is compiled under a file name registered with ``linecache`` (``lane_filename``), so a
traceback through a lane shows its lines.
"""

from __future__ import annotations

import hashlib
import linecache
from dataclasses import dataclass
from typing import Any, Optional

import jax
import numpy as np

from turnout.fast.call_spec import CallSpec
from turnout.graph import Tensor

#: per feed: its tensor, the Python type of its value, its dtype (for a Python number: the tensor's
#: dtype and the numpy type it converts to) and its shape (``None`` for a Python number)
Signature = tuple[tuple[Tensor, type[Any], Any, Optional[tuple[int, ...]]], ...]

#: the iteration bound a lane's call takes: its own (the default options'), or the run's
BOUND_ARG = "bound if run_bound is None else run_bound"

#: numpy scalar types whose dtype is fixed by the type: for them the type is the whole feed check
_FIXED_SCALARS = (np.number, np.bool_)


@dataclass(frozen=True)
class LaneCall:
    """What a lane's text is written from (``lane_text``). Names the text reads from its ``make``:
    per feed of ``sig`` ``t{i}, c{i}, d{i}, s{i}`` (``check_source``), per Variable ``w{i}`` (its name),
    per static fetch ``g{i}``; for an ``attempt`` per stack argument ``b{m}`` (its key) and per kept
    stack ``p{i}``, and ``how`` for a packed result."""

    spec: CallSpec
    sig: Signature
    #: per fed argument of the call, its place in ``sig`` (its value ``v{j}``)
    feeds: tuple[int, ...]
    #: how many Variables the lane checks (``w{i}``; ``r{i}``: the device-copy record of the ``i``-th)
    n_vars: int
    #: per state argument of the call, its Variable's index
    state: tuple[int, ...]
    #: per Variable the call gives a new value: (its index, its result's position, the fetch that holds
    #: its value on the host already or ``None``)
    stores: tuple[tuple[int, int, Optional[int]], ...]
    #: per fetch: the expression of its value, and the index of its live flag (``None``: always live)
    sources: tuple[tuple[str, Optional[int]], ...]
    #: the call is a plan's fused attempt: it takes the rung's stack buffers (``stacks[b{m}]``) and
    #: gives the kept ones back (``p{i}`` at ``res[kept[i]]``), and an outgrown stack hands the run back
    attempt: bool
    kept: tuple[int, ...]
    #: start every output's copy to the host before reading the first (``FastBackend.overlap_reads``)
    overlap: bool
    #: the feeds (places in ``sig``) whose values the call's plan is specialised on (``fast.specialise``):
    #: the lane checks each equals the value its trace took as a constant (``e{i}``)
    fixed: tuple[int, ...]


def sources_of(spec: CallSpec, fetches: list[Tensor], fed: list[Any], ops: Optional[tuple[bool, ...]],
               env: dict[str, Any]) -> Optional[tuple[tuple[str, Optional[int]], ...]]:
    """Per fetch, the expression of its value in a lane's text and the index of its live flag, as the
    call's ``spec`` lays its results out; a static fetch's value goes into ``env`` (``g{i}``). ``fed``:
    the keys of the run's feeds (a fed value fetched does not cross the call: ``v{j}``). ``None`` when
    a fetch is not had from the call (a value dead at trace time: the general path raises)."""
    out: list[tuple[str, Optional[int]]] = []
    for i, t in enumerate(fetches):
        k = (t.node.id, t.index)
        live = spec.live.index(k) if k in spec.live else None
        if ops is not None and ops[i]:
            out.append(("None", live))
        elif k in spec.static:
            if not isinstance(spec.static[k], np.ndarray):
                return None  # (DEAD: the general path raises its DeadFetchError)
            env[f"g{i}"] = spec.static[k]
            out.append((f"g{i}.copy()", live))
        elif spec.packed is not None and k == spec.packed[0]:
            out.append(("pv", live))
        elif k in spec.out:  # (an array read back as it is; a TensorArray or a handle as ``to_host`` makes it)
            j = spec.position(k)
            out.append((f"to_host(res[{j}])" if k in spec.opaque else f"asarray(res[{j}])", live))
        elif k in fed:
            out.append((f"to_host(v{fed.index(k)})", live))
        else:
            return None
    return tuple(out)


def check_source(sig: Signature, n_vars: int, fixed: tuple[int, ...] = ()) -> list[str]:
    """The lines every lane starts with, each returning ``None`` (the general path) on a mismatch: the
    graph unchanged since the lane was made; the feeds (``feed_dict``) those of signature ``sig``
    (per feed: tensor ``t{i}``, Python type ``c{i}``, dtype ``d{i}``, shape ``s{i}``; a shape of
    ``None`` marks a Python number, which is range-checked and converted into ``v{i}``; a
    ``jax.Array`` must still hold a value, on the backend's device, ``home``), and each feed of
    ``fixed`` (a flag or a small index the plan is specialised on) of the value ``e{i}`` its plan
    took as a constant (a Python int or bool compared as the Python value ``x{i}``); and each of the
    ``n_vars`` Variables (``w{i}``) still the session's entry
    its device copy was made from (``r{i}``: that record)."""
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
            if shape is None and i in fixed and issubclass(kind, int):
                # a Python int or bool the plan is specialised on: equal to its value (``x{i}``) it
                # fits the feed's dtype, so the lane takes the converted constant ``e{i}`` instead
                body += [f"        if v{i} != x{i}:", "            return None", f"        v{i} = e{i}"]
                continue
            if shape is None:  # a Python number: the per-value check ``Session._check_feed`` makes
                if kind is not bool:
                    body += [f"        if not fits(d{i}[0], v{i}):", "            return None"]
                body += [f"        v{i} = d{i}[1](v{i})"]
            if i in fixed:  # (a 0-d value compares as one bool; a small array, element by element)
                same = f"v{i} == e{i}" if shape in (None, ()) else f"array_equal(v{i}, e{i})"
                body += [f"        if not ({same}):", "            return None"]
    if n_vars:  # each Variable still the entry its device copy was made from (a store the backend gave)
        body += ["        if type(variables) is not DeviceVariables:", "            return None",
                 "        slots = variables._slots"]
        for i in range(n_vars):
            body += [f"        r{i} = dev_vars.get(w{i})",
                     f"        if r{i} is None or r{i}[0] is not slots.get(w{i}):", "            return None"]
    return body


def lane_text(lc: LaneCall, names: list[str]) -> str:
    """The text of a lane for ``lc``: ``make(*names)`` returning ``lane(feed_dict, variables,
    run_bound=None)``, which runs the checks (``check_source``; for an attempt, the rung's buffers
    still there), the call (flat arguments as ``lc.spec.args`` lays them out), the read of the error
    word and live flags (apart, behind an output, or none), the fetched values (``lc.sources``) and the
    Variables' new values (``lc.stores``), each written out. An error word that is not 0 is acted on
    by ``fail`` (``lane_failure``): raised, or the run handed back (``None``) when a stack outgrew an
    attempt's rung; nothing the call's result would change has been applied then but the stack
    buffers, which the general path takes."""
    spec, a = lc.spec, lc.spec.args
    body = check_source(lc.sig, lc.n_vars, lc.fixed)
    if lc.attempt:  # the last run swapped or climbed, or the stage was traced again: not this lane's call
        body += ["        if top.predict_overflow or top.rung is not plan or stage.fns.get('seg') is not seg:",
                 "            return None",
                 "        stacks = stack_bufs.pop(pid, None)",
                 "        if stacks is None:",  # released, or taken by a run that failed
                 "            return None"]
        if lc.kept:
            body += ["        if StackValue in map(type, stacks.values()):",  # kept by a staged run: buffers alone
                     "            stacks = buffers_of(stacks)"]
    args = ("".join(f"v{j}, " for j in lc.feeds) + "".join(f"r{i}[1], " for i in lc.state)
            + "".join(f"stacks[b{m}], " for m in range(len(a.stacks))) + (BOUND_ARG if a.bounded else ""))
    body += ["        t_start = clock()"]
    if lc.attempt:
        body += ["        try:", f"            res = call({args})", "        except JaxRuntimeError as e:",
                 "            out_of_memory(plan, e)", "            raise"]
    else:
        body += [f"        res = call({args})"]
    body += ["        if pending:  # JAX made the executable's C++ entry point on this first call",
             "            call, pending = cpp_entry(call), False"]
    if lc.attempt:
        body += ["        stack_bufs[pid] = {" + "".join(f"p{i}: res[{j}], " for i, j in enumerate(lc.kept)) + "}"]
    outs = spec.outputs()
    if lc.overlap:
        body += [f"        start_reads(res[{outs.start}:{outs.stop}])"]
    body += _flags_text(spec, lc)
    body += ["        values = [" + "".join(f"{expr}, " for expr, _ in lc.sources) + "]"]
    for i, j, f in lc.stores:  # as ``write_variables`` writes them, written out
        if f is not None:  # fetched too: its host value is read back already
            body += [f"        slots[w{i}] = values[{f}]", f"        dev_vars[w{i}] = (values[{f}], res[{j}])"]
        else:  # deferred until read (``fast.variable_store``)
            body += [f"        z{i} = res[{j}]", f"        q{i} = slots[w{i}] = Deferred(z{i})",
                     f"        dev_vars[w{i}] = (q{i}, z{i})"]
    if lc.attempt:
        body += ["        backend._records = records"]
    body += ["        return values, stats, clock() - t_start"]
    head = ["def make(" + ", ".join(names) + "):",
            "    def lane(feed_dict, variables, run_bound=None):",
            "        nonlocal call, pending"]
    return "\n".join(head + body + ["    return lane"]) + "\n"


def _flags_text(spec: CallSpec, lc: LaneCall) -> list[str]:
    """The lines that read a call's error word and live flags (``spec.flags``: a vector after the
    outputs; ``spec.packed``: the tail of an output, its value ``pv``, split as ``packing.unpack``
    splits, written out: its call frame runs cold, about 1 µs), act on a nonzero word and refuse a
    dead fetch. None for a call that returns no flags.

    A fused attempt's flags hold its stacks' high-water mark (``spec.marked``): the lane hands back a
    run that outgrew its rung (``cap``), leaving its mark as ``marks.pending`` for the general path to
    start from; otherwise it records the mark in its plan's ``StackMarks`` (``recent``, ``marks``) and
    lets the next run start on a lower rung when the marks say so (``top.rung = None`` sends it to the
    general path, which starts where ``marks.start()`` says). Why the test of ``lower`` first: a run
    that did not fit the rung below cannot make the plan descend, so a repeated run of one length pays
    one compare."""
    marked = spec.marked and lc.attempt
    words = "mark, *lives" if marked else "*lives"
    if spec.packed is not None:
        how = spec.packed[1]
        value = "a[0, ...]" if how.shape == () else f"a[:{how.size}].reshape({how.shape!r})"
        tail = f"a[{how.size}:]" + ("" if how.view is None else ".view(how.view)")
        lines = [f"        a = asarray(res[{spec.position(spec.packed[0])}])", f"        pv = {value}",
                 f"        code, {words} = {tail}.tolist()"]
    elif spec.flags:
        lines = [f"        code, {words} = asarray(res[{spec.outputs().stop}]).tolist()"]
    else:
        return []
    if marked:  # (the fused attempt's high-water mark: ``stack_sizes.StackMarks``, written out)
        lines += ["        if code or mark > cap:", "            fail(backend, plan, code, True, mark)",
                  "            marks.pending = mark", "            return None",
                  "        recent.append(mark)", "        stats['stack_mark'] = mark",
                  "        if mark <= lower and marks.start() < cap:", "            top.rung = None"]
    else:
        lines += ["        if code:", f"            fail(backend, plan, code, {lc.attempt})", "            return None"]
    live = [j for _, j in lc.sources if j is not None]
    if live:
        flags = "(" + "".join(f"lives[{j}], " if j is not None else "1, " for _, j in lc.sources) + ")"
        lines += ["        if not (" + " and ".join(f"lives[{j}]" for j in live) + "):",
                  f"            refuse_dead(fetches, {flags})"]
    return lines


def lane_filename(source: str) -> str:
    """The file name a lane's text is compiled under, registered with ``linecache`` so that a
    traceback through a lane shows its lines (a generated function is otherwise a frame without
    source). Named by the text's digest: two lanes of one text share one entry, and the entries stay
    as few as the distinct lanes a process makes."""
    name = f"<turnout.fast.lane {hashlib.sha1(source.encode('utf-8')).hexdigest()[:12]}>"
    linecache.cache[name] = (len(source), None, source.splitlines(keepends=True), name)
    return name
