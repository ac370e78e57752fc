"""The host's side of a run of steps: the values of a scope, where each lives, and the Switches the
host decides.

Why a module of its own: the one runner (``fast.runner``) keeps between segment calls an environment
that the emitter (``fast.emit``) does not need: each value's device (a segment on another device
reads a copy, made once per device), and, in a threaded run, values that are still the futures of
segment calls (``Lazy``). The host-driven conds and loops (``fast.host_control``) and the segment
calls (``fast.runner``) both work on it, and a run's fetches are read from it (``fetched``).
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any, Optional

import jax
import numpy as np

from turnout.errors import DeadFetchError, dead_fetch_message
from turnout.fast.plumbing import Wire, switch_wires
from turnout.fast.regions import Key, key
from turnout.fast.values import DEAD, Handle, to_host
from turnout.graph import Tensor


class HostEnv:
    """A scope's values on the host side, with the device each lives on, and the copies already made
    to other devices (so a value read by two segments on one device crosses once)."""

    def __init__(self, vals: Optional[dict[Key, Any]] = None, where: Optional[dict[Key, Optional[str]]] = None,
                 copies: Optional[dict[Key, dict[str, Any]]] = None) -> None:
        self.vals: dict[Key, Any] = dict(vals or {})
        self.where: dict[Key, Optional[str]] = dict(where or {})
        self.copies: dict[Key, dict[str, Any]] = dict(copies or {})

    def child(self) -> HostEnv:
        """A scope inside this one (a branch, an iteration): it sees this scope's values, and what it
        sets stays its own."""
        return HostEnv(self.vals, self.where, self.copies)

    def set(self, k: Key, v: Any, device: Optional[str]) -> None:
        """``self[k] = v``, made on ``device`` (None: known on the host)."""
        self.vals[k] = v
        self.where[k] = where_of(v, device)
        self.copies.pop(k, None)

    def take(self, k: Key, other: HostEnv, src: Key) -> None:
        """``self[k] = other[src]``, keeping where it lives."""
        self.set(k, other.vals[src], other.where.get(src))

    def wire(self, wires: Sequence[Wire], src: HostEnv) -> None:
        """Apply the plumbing's ``wires`` (``fast.plumbing``) from ``src``: each output takes its
        source where it lives, or the constant, known on the host."""
        for w in wires:
            if w.src is None:
                self.set(w.dst, w.value, None)
            else:
                self.take(w.dst, src, key(w.src))

    def on(self, k: Key, device: str, jdev: Any) -> Any:
        """The value of ``k`` on ``device`` (JAX device ``jdev``): copied there once, if it lives
        elsewhere."""
        v = self.vals[k]
        w = self.where.get(k)
        if w is None or w == device:
            return v
        per = self.copies.get(k)
        got = per.get(device) if per is not None else None
        if got is None:
            got = jax.device_put(v, jdev)
            # a fresh dict: a child scope's copy must not show up in its parent's cache
            self.copies[k] = {**(per or {}), device: got}
        return got


def where_of(v: Any, device: Optional[str]) -> Optional[str]:
    """The device a value lives on; None for values known on the host (numpy, dead, handles)."""
    if v is DEAD or isinstance(v, (np.ndarray, np.generic, Handle)) or device is None:
        return None
    return device if jax.tree_util.tree_leaves(v) else None


class Lazy:
    """A segment output the host has not needed yet, in a threaded run: the future of the segment's
    call and the key. ``get`` waits for the call (not for the device: the value may still be computing)."""

    __slots__ = ("data", "fut", "k", "live")

    def __init__(self, fut: Future[Any], k: Key, live: bool = False, data: bool = False) -> None:
        # data: a loop variable, which enters the next iteration as a device value even when it was
        # known at trace time (as the host driver does for values it holds), so segments trace once
        self.fut, self.k, self.live, self.data = fut, k, live, data

    def get(self) -> Any:
        """The output (or its live flag), once the call has returned."""
        out, lives, _ = self.fut.result()
        if self.live:
            return lives.get(self.k, True)
        if self.k[1] == -1:  # a node's deadness marker: absent means the node fired live
            return out.get(self.k)
        return out.get(self.k, DEAD)


def resolved(v: Any) -> Any:
    """The value itself, waiting for the segment call that makes it if need be."""
    return v.get() if isinstance(v, Lazy) else v


def abstract(v: Any) -> Any:
    """``v`` as a trace that runs nothing reads it: each JAX array its ``jax.ShapeDtypeStruct``,
    a value not computed yet waited for; constants (numpy, dead, handles) as they are."""
    return jax.tree_util.tree_map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype) if isinstance(x, jax.Array) else x, resolved(v))


def switched(env: HostEnv, switches: Sequence[Any], taken: int) -> HostEnv:
    """A child of ``env`` past ``switches``: each forwards its input to output ``taken``; the other
    output is dead (a cond's branch, a loop's body with 1, its exit side with 0)."""
    out = env.child()
    out.wire(switch_wires(switches, taken), env)
    return out


def fetched(fetches: list[Tensor], vals: dict[Key, Any], lives: dict[Key, Any]) -> list[Any]:
    """The fetched values on the host, waiting for the calls that make them; a fetch that is dead
    (``DEAD``, absent, or its live flag false) raises ``DeadFetchError``: the last step of every run."""
    values = []
    for t in fetches:
        k = key(t)
        v = resolved(vals.get(k, DEAD))
        if v is DEAD or not bool(np.asarray(resolved(lives.get(k, True)))):
            raise DeadFetchError(dead_fetch_message(t.name, t.node))
        values.append(to_host(v))
    return values


__all__ = ["HostEnv", "Lazy", "abstract", "fetched", "resolved", "switched", "where_of"]
