"""One compiled segment: items of a program run by the emitter, called in the one calling convention.

Why a module of its own: two runners call a compiled run of items between host decisions — the fast
backend's staged path (a stage of root items between its driven loops) and the
fast partitioned executor's per-device tiers (a segment of one device between host-driven conds and
loops, ``devices.plan_run``). Each once built its own function, dicts in and out, with its own idea of
what came back; now ``SegmentFn`` is both, in the calling convention of ``fast.call_spec``: flat
arguments (the values read, the state, the stacks, donated, the iteration bound), flat results laid
out by ``call_spec.lay_out`` (stacks first, in their arguments' order, so donated buffers pair with
their own results; the outputs; the live flags; the state that left changed). What differs between
the two runners is passed in: which items, which keys leave, which of them leave with a live flag,
how an emitter is made (the plan's options, the trace counter) and how a function is jitted.

What a segment does with its error word, as plain Python (``call`` is one call of the segment)::

    out, lives, state = call(env_in, {"err": word, **variables, **stacks}, bound)
    # state["err"] is the word after the call: a new device value on every call

The word is *carried* (``CallArgs.carries_word``): it comes in as a state entry and leaves as one, on
the device, on every call, because a segment is one call of a sequence — the partitioned tiers
dispatch a device's segments ahead and read its word only when the host must wait (a loop's window,
the end of the run), and a traced run waits for each call's word to stamp its end. So the flags
vector holds only live flags, and nothing rides behind an output (``fast.packing``): an output of a
segment is read by the next one, which must get it as a device value, not as a host value unpacked
from a carrier.

Why a function of the arguments' layout, and each call's ``CallSpec`` returned with its results
(``call_spec.Tagged``): a segment is traced again when what it reads changes type — a host loop's first
iteration gives a Merge's index as a constant other than later ones, a loop variable can change
shape — and another trace may lay its results out otherwise (an output constant in one, traced in
the other). The ``Direct`` call and the fused attempt are traced once per plan and keep one spec
(``call_spec.flat_call`` refuses a second layout); a segment's results carry the spec of the trace
that made them (``call_spec.tagged_call``), a leafless pytree node that JAX hands back with every call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from turnout.fast import stacks as stk
from turnout.fast.call_spec import LayoutCalls, Traced
from turnout.fast.emit import Emitter
from turnout.fast.regions import Item, Key

#: ``emitter(state, bound)``: a fresh emitter over the program starting from ``state`` (made only
#: while tracing: the caller counts its traces there)
MakeEmitter = Callable[[dict[str, Any], Any], Emitter]


class SegmentFn:
    """A compiled segment of ``items``: ``call(env_in, state, bound) -> (outputs, live flags, state)``.

    ``writes`` are the keys that leave it (those its items make), ``fetched`` those of them that leave
    with a live flag (a fetch inside a compiled cond can be dead); ``emitter`` makes the emitter of a
    trace and ``jit`` jits a function (``jit(fn, donate_argnums=...)``). The outputs are device values,
    constants known while tracing (numpy, or ``DEAD``); a segment reads none of the keys it writes
    (``fast.cut`` makes it so), so no output is a value the caller passed in. The state is the
    caller's, with what the call changed: the stacks (donated: updated in place), the error word, the
    Variables it assigned, the stacks it made. Its calls are ``call_spec.LayoutCalls``: one function
    per layout of the arguments."""

    def __init__(self, items: list[Item], writes: list[Key], fetched: set[Key], emitter: MakeEmitter,
                 jit: Callable[..., Any]) -> None:
        self.items = items
        self.writes = writes
        self.fetched = fetched
        self.emitter = emitter
        self.calls = LayoutCalls(self._body, jit)

    def __call__(self, env_in: dict[Key, Any], state: dict[str, Any], bound: Any
                 ) -> tuple[dict[Key, Any], dict[Key, Any], dict[str, Any]]:
        rest, stacks = stk.split_state(state)
        out, lives, new = self.calls(env_in, rest, stacks, bound)
        return out, lives, {**rest, **new}

    def trace(self, env_in: dict[Key, Any], state: dict[str, Any], bound: Any
              ) -> tuple[dict[Key, Any], dict[Key, Any], dict[str, Any]]:
        """A call traced, not run (``LayoutCalls.trace``): what it would return, as
        ``jax.ShapeDtypeStruct`` and constants."""
        rest, stacks = stk.split_state(state)
        out, lives, new = self.calls.trace(env_in, rest, stacks, bound)
        return out, lives, {**rest, **new}

    def _body(self, feeds: dict[Key, Any], given: dict[str, Any], stacks: dict[str, Any], bound: Any) -> Traced:
        """The items run on the arguments: what leaves, in the terms of ``call_spec.Traced``."""
        em = self.emitter({**given, **stacks}, bound)
        env = dict(feeds)
        em.run_items(self.items, env)
        out = {k: env[k] for k in self.writes if k in env}
        lives = {k: em.lives.get(k, True) for k in self.writes if k in self.fetched and k in env}
        # every stack comes back (it was donated), the word always (the caller waits on each call's),
        # any other entry only when it changed
        state = {k: v for k, v in em.state.items() if k == "err" or k in stacks or v is not given.get(k)}
        return Traced(out, 0, lives, state)


__all__ = ["MakeEmitter", "SegmentFn"]
