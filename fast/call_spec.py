"""One calling convention for a compiled call: ``CallArgs`` in, ``CallSpec`` out, built by ``flat_call``.

Why a module of its own: the fast backend's ``Direct`` call (a plan of one compiled segment) and a
plan's fused attempt (a whole training step through a loop) are both one jitted function called with
flat arguments and returning flat results, read back by the general path (``FastBackend``) and by a
lane (``fast.lane``) written out for a repeated run. Each once kept its own record of what its
arguments and results were; now one value says it, and one builder makes the function that fits it.
A compiled segment (``fast.segment``: a stage of the staged path, a segment of the partitioned
tiers) is called in the same convention, its results laid out by the same ``lay_out``; it carries its
error word in its state (``CallArgs.carries_word``) and hands back each call's spec with its results
(``tagged_call``), as it is traced once per type of what it reads; so does a fused group of a
cluster partition (``devices.compiled_partition``). The partitioned backend's SPMD program
(``devices.spmd``) is built by ``flat_call`` with a ``jit`` that maps the function over a mesh of
devices, each returning its own copy of every result; its word is carried, so that each device's
leaves apart from the outputs that the run reads from their owners.

The convention, as plain Python (``args``: a ``CallArgs``; ``spec``: the ``CallSpec`` its trace made)::

    res = fn(*feeds, *state, *stacks, *([bound] if args.bounded else []))
    # res == (*stacks that leave, *outputs, *([flags] if spec.flags else []), *state that left changed)

- **arguments**: the fed values (``args.feeds``, keys), the state entries (``args.state``: the
  Variables' device copies), the stacks' buffers (``args.stacks``, donated: the call updates them in
  place), then the iteration bound where the program has a loop (every argument costs the call a few
  microseconds of dispatch, which is what a small program's run is made of);
- **results**: first the stacks that came in, in their arguments' order. Why: JAX pairs each donated
  argument with the first result of its shape and dtype not yet paired, so a stack returned in another
  stack's place, or behind an output of its shape, would be written into another buffer, and XLA would
  copy every such buffer on every run (for the benchmark LSTM, 512 MB of stacks: 300 ms a run). Then
  the outputs (``spec.out``); then the int32 flags vector (the error word, then a live flag per key of
  ``spec.live``, with the stacks' high-water mark between them where ``spec.marked``; a word carried in
  the state leaves there, and the flags hold 0 in its place) unless it
  rides behind an output (``spec.packed``, ``fast.packing``: one result and one read-back fewer; never
  where the word is carried) or there is none (tracing showed no check can fail and every output is live); then
  the other state entries that left the call changed (``spec.changed``). A state entry whose new value
  is also an output is returned once, as the output (``spec.aliases``); one that left as it came is not
  returned at all (returning it would copy it: the caller keeps what it passed).
- **static outputs**: an output that is a constant while tracing (``spec.static``) does not cross the
  call: JAX would unwrap it into a numpy array after the call, and a result that is no device array
  keeps the executable off JAX's C++ dispatch (each call then took its Python path, about 150 µs on the
  development machine: 5 times a small RNN step's compiled call). The caller merges it.

Why flat, where dicts would read better: JAX's dispatch flattens a call's arguments and results on
every call, and dicts cost it more than positions (it sorts and compares their keys): for the small
RNN step of ``benchmarks/run_overhead.py`` about 3 µs a run, a tenth of JAX's whole run of the step.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from turnout.fast import packing
from turnout.fast.regions import Key
from turnout.fast.values import DEAD, Static, wrap_static


@dataclass(frozen=True)
class CallArgs:
    """The keys of a compiled call's flat arguments, in order: fed values, state entries, stacks (donated),
    then the iteration bound when ``bounded``."""

    feeds: tuple[Key, ...]
    state: tuple[str, ...]
    stacks: tuple[str, ...] = ()
    bounded: bool = True

    @property
    def carries_word(self) -> bool:
        """Whether the error word comes in as a state entry (``"err"``) and leaves as one: a call of a
        sequence whose host reads the word only when it must (``fast.segment``). Otherwise the call
        starts from no error and its word leaves in the flags."""
        return "err" in self.state

    def donated(self) -> tuple[int, ...]:
        """The positions of the stacks among the flat arguments: donated to the call."""
        start = len(self.feeds) + len(self.state)
        return tuple(range(start, start + len(self.stacks)))

    def flat(self, feeds: Mapping[Key, Any], state: Mapping[str, Any], stacks: Mapping[str, Any],
             bound: Any) -> tuple[Any, ...]:
        """The flat arguments of a call from keyed values (the general path's call)."""
        return (*[feeds[k] for k in self.feeds], *[state[k] for k in self.state], *[stacks[k] for k in self.stacks],
                *([bound] if self.bounded else []))

    def keyed(self, args: tuple[Any, ...]) -> tuple[dict[Key, Any], dict[str, Any], dict[str, Any], Any]:
        """Flat arguments keyed again: ``(feeds, state, stacks, bound or None)`` (inside the trace)."""
        a, b = len(self.feeds), len(self.feeds) + len(self.state)
        c = b + len(self.stacks)
        return (dict(zip(self.feeds, args[:a], strict=True)), dict(zip(self.state, args[a:b], strict=True)),
                dict(zip(self.stacks, args[b:c], strict=True)), args[c] if self.bounded else None)


@dataclass(frozen=True)
class CallSpec:
    """What one trace of a compiled call returns, position by position (the module docstring gives the
    layout): made by ``flat_call`` while tracing, read by the general path (``split``, ``read_flags``)
    and by a lane's text generator (``position``, ``outputs``)."""

    args: CallArgs
    #: the stacks that leave the call, in their arguments' order
    stacks: tuple[str, ...]
    #: the outputs that cross the call, by key
    out: tuple[Key, ...]
    #: a flags vector follows the outputs (else they ride behind ``packed``, or there are none)
    flags: bool
    #: the state entries (not stacks) that left the call changed and are returned after the flags
    changed: tuple[str, ...]
    #: state entries whose new value is an output: (state key, output key); returned once, as the output
    aliases: tuple[tuple[str, Key], ...] = ()
    #: the keys whose live flags follow the error word in the flags, in order
    live: tuple[Key, ...] = ()
    #: the output that carries the flags behind its value (``fast.packing``), and how to split it
    packed: Optional[tuple[Key, packing.Packing]] = None
    #: the outputs that are constants while tracing (``DEAD`` for a value dead at trace time): merged
    #: by the caller instead of crossing the call
    static: Mapping[Key, Any] = field(default_factory=dict, compare=False)
    #: the outputs that are not plain arrays (a TensorArray, a handle): read back with ``values.to_host``
    opaque: frozenset[Key] = frozenset()
    #: the flags hold the stacks' high-water mark after the error word (``Traced.mark``)
    marked: bool = False

    def outputs(self) -> slice:
        """Where the outputs are in the flat results."""
        return slice(len(self.stacks), len(self.stacks) + len(self.out))

    def position(self, k: Any) -> int:
        """The position in the flat results of output ``k`` (a key) or of state entry ``k`` (a stack,
        a changed entry, or one whose new value is an output)."""
        if k in self.stacks:
            return self.stacks.index(k)
        alias = dict(self.aliases).get(k, k)
        if alias in self.out:
            return len(self.stacks) + self.out.index(alias)
        return len(self.stacks) + len(self.out) + self.flags + self.changed.index(k)

    def returns(self, k: str) -> bool:
        """Whether state entry ``k`` comes back from the call (else it left as it came in)."""
        return k in self.stacks or k in self.changed or k in dict(self.aliases)

    def split(self, res: tuple[Any, ...]) -> tuple[dict[Key, Any], Any, dict[str, Any]]:
        """The flat results ``res`` as ``(outputs, flags or None, state that left changed)``, keyed
        again; the static outputs are not among them."""
        a = len(self.stacks)
        b = a + len(self.out)
        c = b + self.flags
        out = dict(zip(self.out, res[a:b], strict=True))
        state = dict(zip(self.stacks, res[:a], strict=True))
        state.update(zip(self.changed, res[c:], strict=True))
        state.update((k, out[o]) for k, o in self.aliases)
        return out, res[b] if self.flags else None, state

    def read_flags(self, out: dict[Key, Any], flags: Any) -> Flags:
        """After ``split``, on the host: the outputs with the carrier's value split from the flags it
        carried, the error word (0 where the call returns none), the live flags by key and the
        stacks' high-water mark (0 where the call returns none)."""
        if self.packed is not None:
            k, how = self.packed
            value, words = packing.unpack(np.asarray(out[k]), how)
            out = {**out, k: value}
        elif self.flags:
            words = np.asarray(flags).tolist()
        else:
            return Flags(out, 0, {}, 0)
        code, *lives = words
        mark = lives.pop(0) if self.marked else 0
        return Flags(out, code, dict(zip(self.live, lives, strict=True)), mark)


class Flags(NamedTuple):
    """A call's results after ``CallSpec.read_flags``: its outputs, error word, live flags by key and
    the most entries any of its gradient stacks held (``Traced.mark``; 0 for a call that keeps none)."""

    out: dict[Key, Any]
    code: int
    lives: dict[Key, int]
    mark: int


class Traced(NamedTuple):
    """What a call's body computed while tracing, keyed: its outputs (possibly constants or ``DEAD``),
    its error word, the live flag per fetched key (in the order the flags will hold them), the
    state entries (stacks included) that leave the call changed, and, for a call that keeps one (the
    fused attempt), the high-water mark of its stacks (``Emitter.note_mark``), which leaves in the
    flags after the error word."""

    out: dict[Key, Any]
    err: Any
    lives: dict[Key, Any]
    state: dict[str, Any]
    mark: Any = None


#: a call's body: ``body(feeds, state, stacks, bound or None) -> Traced``, traced by ``flat_call``
Body = Callable[[dict[Key, Any], dict[str, Any], dict[str, Any], Any], Traced]


def flat_call(args: CallArgs, body: Body, jit: Callable[..., Any], record: Callable[[CallSpec], None]) -> Any:
    """The jitted function (``jit(fn, donate_argnums=...)``) of the calling convention for arguments laid
    out as ``args`` say: it keys its flat arguments, runs ``body``, lays the results out
    (``lay_out``) and hands the ``CallSpec`` of each trace to ``record``. The one builder of the
    ``Direct`` call and of the fused attempt (``Plan.direct_fn``, ``Plan.fused_fn``).

    One function, one layout: its callers read every call's results by the one spec they hold, and JAX
    keeps each trace of the function, so a later trace that laid its results out otherwise (other
    argument types giving other outputs constant, or another carrier of the flags) would have calls
    that hit the earlier trace read by the wrong spec. Such a trace is refused (``AssertionError``:
    a fault of ours, loud rather than a wrong value); its callers make one function per layout of
    arguments and signature of the run."""
    first: list[CallSpec] = []

    def fn(*flat: Any) -> tuple[Any, ...]:
        spec, res = lay_out(args, body(*args.keyed(flat)))
        if first and first[0] != spec:
            raise AssertionError(f"a compiled call traced again laid its results out otherwise: {first[0]} then {spec}")
        first[:] = [spec]
        record(spec)
        return res

    return jit(fn, donate_argnums=args.donated())


@jax.tree_util.register_pytree_node_class
class Tagged:
    """The ``CallSpec`` of the trace that made a call's results, handed back with them: a pytree node
    without leaves, so it crosses the call as structure, not as a value."""

    __slots__ = ("spec",)

    def __init__(self, spec: CallSpec) -> None:
        self.spec = spec

    def tree_flatten(self) -> tuple[tuple[()], Any]:
        """No children; the node itself is the auxiliary data."""
        return (), self

    @classmethod
    def tree_unflatten(cls, aux: Any, children: tuple[()]) -> Tagged:
        """The node, as it was flattened."""
        return aux  # type: ignore[no-any-return]


def tagged_call(args: CallArgs, body: Body, jit: Callable[..., Any]) -> Any:
    """The jitted function of the calling convention for a call that is traced again when what it
    reads changes type (a compiled segment, a cluster partition's fused group): ``fn(*flat) -> (res,
    Tagged(spec))``, each call's results handed back with the ``CallSpec`` of the trace that made
    them. Why not ``flat_call``'s one spec: another trace may lay its results out otherwise (an
    output constant in one, traced in the other), and JAX keeps every trace, so a call is read by
    the spec of its own."""
    def fn(*flat: Any) -> tuple[tuple[Any, ...], Tagged]:
        spec, res = lay_out(args, body(*args.keyed(flat)))
        return res, Tagged(spec)

    return jit(fn, donate_argnums=args.donated())


class LayoutCalls:
    """A body called in the calling convention with keyed values, one jitted function per layout of
    its arguments (their keys: ``CallArgs``), each call read by the spec of its own trace
    (``tagged_call``): the caller of a compiled segment (``fast.segment``) and of a driven loop's
    calls (``fast.driven``), whose arguments' keys change from call to call (a stack made at its first
    push, a loop that did not run) and whose traces change with their types."""

    def __init__(self, body: Body, jit: Callable[..., Any]) -> None:
        self.body = body
        self.jit = jit
        self.fns: dict[tuple[Any, ...], tuple[CallArgs, Any]] = {}

    def __call__(self, feeds: Mapping[Key, Any], state: Mapping[str, Any], stacks: Mapping[str, Any],
                 bound: Any) -> tuple[dict[Key, Any], dict[Key, Any], dict[str, Any]]:
        """One call: ``(outputs, live flags by key, the state entries that left it changed)``, the
        outputs with the trace's constants merged (copies: ``copy_static``), the flags device values."""
        args, fn = self._fn(feeds, state, stacks)
        res, tag = fn(*args.flat(feeds, state, stacks, bound))
        return self._read(res, tag.spec)

    def trace(self, feeds: Mapping[Key, Any], state: Mapping[str, Any], stacks: Mapping[str, Any],
              bound: Any) -> tuple[dict[Key, Any], dict[Key, Any], dict[str, Any]]:
        """What a call would return, traced and not run: the results as ``jax.ShapeDtypeStruct``
        (and the trace's constants), from arguments that may be the same. Why: a plan learns from
        its traces (the constants its stacks' pushes pushed), and a step no run reached has taught
        it nothing (``HostControl.learn_unrun``)."""
        args, fn = self._fn(feeds, state, stacks)
        res, tag = fn.trace(*args.flat(feeds, state, stacks, bound)).out_info
        return self._read(res, tag.spec)

    def _fn(self, feeds: Mapping[Key, Any], state: Mapping[str, Any], stacks: Mapping[str, Any]
            ) -> tuple[CallArgs, Any]:
        """The layout of a call's arguments and the jitted function of that layout."""
        # sorted: a state that gained an entry (a stack made at its first push) keeps one layout
        layout = (tuple(feeds), tuple(sorted(state)), tuple(sorted(stacks)))
        got = self.fns.get(layout)
        if got is None:
            args = CallArgs(*layout)
            got = self.fns[layout] = (args, tagged_call(args, self.body, self.jit))
        return got

    @staticmethod
    def _read(res: tuple[Any, ...], spec: CallSpec) -> tuple[dict[Key, Any], dict[Key, Any], dict[str, Any]]:
        """A call's flat results read by the spec of its trace (see ``__call__``)."""
        out, flags, new = spec.split(res)
        out.update((k, copy_static(v)) for k, v in spec.static.items())
        lives: dict[Key, Any] = dict.fromkeys(spec.live, True)
        if flags is not None:  # (a live flag traced: the flags follow the outputs, on the device)
            lives.update(zip(spec.live, list(flags)[1:], strict=True))
        return out, lives, new


def lay_out(args: CallArgs, t: Traced) -> tuple[CallSpec, tuple[Any, ...]]:
    """A body's traced results in the flat convention, and the ``CallSpec`` that says where each is."""
    out = {k: wrap_static(v) for k, v in t.out.items()}
    static = {k: (DEAD if v is DEAD else v.value) for k, v in out.items() if v is DEAD or isinstance(v, Static)}
    out = {k: v for k, v in out.items() if k not in static}
    lives = list(t.lives.values())
    marked = t.mark is not None and not _is_zero(t.mark)
    flags: Any = None
    if marked or not (_is_zero(t.err) and all(live is True for live in lives)):
        flags = jnp.stack([jnp.asarray(t.err, jnp.int32)] + ([jnp.asarray(t.mark, jnp.int32)] if marked else [])
                          + [jnp.asarray(live, jnp.int32) for live in lives])
    back = tuple(k for k in args.stacks if k in t.state)
    aliases = tuple((k, o) for k, v in t.state.items() if k not in back
                    for o in [next((o for o, w in out.items() if w is v), None)] if o is not None)
    aliased = dict(aliases)
    changed = tuple(k for k in t.state if k not in back and k not in aliased)
    packed = None
    # behind a small fetched value when one can carry them (``fast.packing``); not where the word is
    # carried: such a call's outputs feed the next call, which must get them as device values
    if flags is not None and not args.carries_word:
        live = tuple(t.lives)
        taken = {i for i, k in enumerate(live) if k in aliased.values()}
        at = packing.carrier(tuple(out.get(k) for k in live), taken)
        if at is not None:
            k = live[at]
            out[k], how = packing.pack(out[k], flags)
            packed, flags = (k, how), None
    spec = CallSpec(args, back, tuple(out), flags is not None, changed, aliases, tuple(t.lives), packed, static,
                    frozenset(k for k, v in out.items() if not isinstance(v, jax.Array)), marked)
    res = (*[t.state[k] for k in back], *out.values(), *([] if flags is None else [flags]),
           *[t.state[k] for k in changed])
    return spec, res


def copy_static(v: Any) -> Any:
    """A static output as a run hands it out: a copy of a numpy constant (the spec keeps the one the
    trace found, which a caller that writes into its result must not change), anything else as it is."""
    return v.copy() if isinstance(v, np.ndarray) else v


def _is_zero(v: Any) -> bool:
    """Whether an error word (or the stacks' mark, an int32 scalar too) is known to be 0 while
    tracing (a constant, not a traced value)."""
    return not isinstance(v, jax.core.Tracer) and int(np.asarray(v)) == 0
