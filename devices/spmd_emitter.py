"""The SPMD tier's emitter: the fast backend's ``Emitter`` with every op run on its owner device.

``turnout.devices.spmd`` describes the tier and plans a run; this module is the part that traces it.
``SpmdEmitter`` runs inside one ``shard_map`` over a mesh whose axis is ``AXIS``; every device traces
the same program, and ``lax.axis_index`` tells each which ops are its own. Three things differ from
the one-device emitter:

* **ops run in batches**: consecutive ops of one scope form a batch until an op reads a value another
  device computed in it; a batch is one ``lax.switch`` whose branch ``d`` runs device ``d``'s ops
  (``run_items``, ``_flush``);
* **values move**: a value read on another device than its owner's goes there by ``lax.ppermute``, as
  few calls as the moves allow, and is remembered in its scope (``read``, ``_move_all``);
* **predicates are shared**: a cond's or loop's predicate is broadcast from its owner by a ``psum``
  (``read_pred``), so every device takes the same branch and loops in lockstep.

Gradient stack pushes and pops run on every device, outside any branch (``_everywhere``).

Why a module of its own: the class was once built inside a function to import jax lazily; the tier's
only caller (``devices.fast_executor``) imports jax anyway, so the emitter is a plain class here and
``spmd.py`` keeps eligibility and the plan.
"""

from __future__ import annotations

from collections import ChainMap
from collections.abc import Callable
from typing import Any, Optional

import jax
import jax.numpy as jnp

from turnout.fast.emit import Emitter, Traced, _jnp_tree, _zeros_of
from turnout.fast.lowering_base import Shows
from turnout.fast.regions import CondRegion, Key, WhileRegion, key
from turnout.fast.values import DEAD, Handle, is_static
from turnout.graph import Node, Tensor

AXIS = "spmd"
#: ops that read or write run-time state (Variables, gradient stacks): they run on their owner device
STATEFUL = frozenset({"ReadVariable", "AssignVariable", "AssignAddVariable", "AssignSubVariable",
                      "StackPush", "StackPop"})
#: ops that forward their input unchanged: no computation, so no branch; a move when they cross devices
FORWARD = frozenset({"Identity", "StopGradient"})
#: stack bookkeeping, run on every device outside any branch (see ``SpmdEmitter._everywhere``)
STACK_OPS = frozenset({"StackPush", "StackPop"})

Env = dict[Any, Any]
#: one move: the tensor, its owner's mesh position, the reader's mesh position
Move = tuple[Tensor, int, int]
#: a branch of a batch: the state in, (the outputs other devices or the fetches need, the state) out
Branch = Callable[[Any], tuple[Any, Any]]


def no_leaves(v: Any) -> bool:
    """A value with no arrays in it (a constant, a handle, a dead value): the same on every device."""
    return is_static(v) or not jax.tree_util.tree_leaves(v)


def rounds(moves: list[Move]) -> list[list[Move]]:
    """``moves`` split, in order, into rounds whose sources are distinct and whose destinations are
    distinct: what one ``ppermute`` can carry (each device sends one value and receives one)."""
    out = []
    while moves:
        rnd: list[Move] = []
        rest: list[Move] = []
        srcs: set[int] = set()
        dsts: set[int] = set()
        for m in moves:
            if m[1] in srcs or m[2] in dsts:
                rest.append(m)
            else:
                rnd.append(m)
                srcs.add(m[1])
                dsts.add(m[2])
        out.append(rnd)
        moves = rest
    return out


def filled(branch: Optional[Branch], shapes: dict[Key, Any]) -> Branch:
    """``branch`` with every output of the batch (``shapes``) present, zeros where it computes none:
    the branches of one ``lax.switch`` must return one type. ``None``: a device with no ops here."""

    def fn(state: Any) -> Any:
        outs, st = branch(state) if branch is not None else ({}, state)
        full = {k: outs[k] if k in outs else _zeros_of(s) for k, s in shapes.items()}
        return _jnp_tree(full), _jnp_tree(st)

    return fn


class SpmdEmitter(Emitter):
    """The fast backend's emitter, with every op run on its owner device and values moved between
    devices where an edge crosses them (see the module docstring and ``turnout.devices.spmd``)."""

    state: dict[str, Any]  # set by ``Emitter.__init__``; declared for mypy, to which ``Emitter`` is Any

    def __init__(self, *args: Any, loc: dict[int, int], ndev: int, readers: dict[Key, set[int]],
                 **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.loc = loc
        self.ndev = ndev
        self.readers = readers
        self.idx = jax.lax.axis_index(AXIS)
        self.moves = 0       # ppermute calls traced
        self.mask: Optional[int] = None  # while set, checks count only on this mesh position
        self.broadcasts = 0  # predicate psums traced
        self.batches = 0     # lax.switch / lax.cond batches traced

    # -- moves ---------------------------------------------------------------------------------------
    def _where(self, env: Env, t: Tensor, reader: Node) -> Optional[tuple[int, int]]:
        """(source, destination) mesh positions when ``reader`` needs ``t`` moved, else None."""
        v = env[key(t)]
        if v is DEAD or no_leaves(v) or t.node.id in self.fed:
            return None
        src, dst = self.loc.get(t.node.id), self.loc.get(reader.id)
        if src is None or dst is None or src == dst:
            return None
        hit = env.get(("moved", key(t), dst))
        if hit is not None and hit[0] is v:
            return None
        return src, dst

    def read(self, env: Env, t: Tensor, reader: Node) -> Any:
        """``t`` as ``reader``'s device holds it, moved there first (one ``ppermute``) when another device owns it
        and has not sent it yet."""
        if self._where(env, t, reader) is not None:
            self._move_all(env, [(t, reader)])
        return self._local(env, t, reader)

    def _local(self, env: Env, t: Tensor, reader: Node) -> Any:
        """``t`` as ``reader``'s device holds it: its moved copy there if it was moved, else its value."""
        v = env[key(t)]
        hit = env.get(("moved", key(t), self.loc.get(reader.id)))
        return hit[1] if hit is not None and hit[0] is v else v

    def _move_all(self, env: Env, wants: list[tuple[Tensor, Node]]) -> None:
        """Move every (tensor, reader) pair's value to the reader's device, with as few ``ppermute``
        calls as the pairs allow: arrays of one shape and dtype whose moves have distinct sources and
        distinct destinations travel in one call, each device sending the one it owns."""
        for members in self._groups(env, self._pending(env, wants)).values():
            for rnd in rounds(members):
                self._permute(env, rnd)
                self.moves += 1

    def _pending(self, env: Env, wants: list[tuple[Tensor, Node]]) -> list[Move]:
        """The moves ``wants`` needs, one per (tensor, destination), in the order first wanted."""
        todo: dict[tuple[Key, int], Move] = {}
        for t, reader in wants:
            sd = self._where(env, t, reader)
            if sd is not None:
                todo[(key(t), sd[1])] = (t, *sd)
        return list(todo.values())

    def _groups(self, env: Env, moves: list[Move]) -> dict[Any, list[Move]]:
        """``moves`` grouped by what may share a ``ppermute``: plain arrays of one shape and dtype; a
        pytree (a TensorArray) travels alone."""
        groups: dict[Any, list[Move]] = {}
        for t, src, dst in moves:
            v = env[key(t)]
            leaves = jax.tree_util.tree_leaves(v)
            single = len(leaves) == 1 and leaves[0] is v  # a plain array, not a TensorArray
            sig = (jnp.shape(v), jnp.result_type(v)) if single else ("tree", key(t), dst)
            groups.setdefault(sig, []).append((t, src, dst))
        return groups

    def _permute(self, env: Env, rnd: list[Move]) -> None:
        """One ``ppermute`` for one round; each destination remembers what it received, in ``env``."""
        perm = [(s, d) for _, s, d in rnd]
        if len(rnd) == 1:
            t = rnd[0][0]
            v = env[key(t)]
            moved = jax.tree_util.tree_map(lambda x: jax.lax.ppermute(x, AXIS, perm), v)
            env[("moved", key(t), rnd[0][2])] = (v, moved)
            return
        # each source sends its own value of the round: select it by mesh position
        send = env[key(rnd[0][0])]
        for t, s, _ in rnd[1:]:
            send = jax.lax.select(self.idx == s, jnp.asarray(env[key(t)]), jnp.asarray(send))
        got = jax.lax.ppermute(send, AXIS, perm)
        for t, _, d in rnd:
            env[("moved", key(t), d)] = (env[key(t)], got)

    # -- checks and predicates -------------------------------------------------------------------------
    def check(self, ok: Any, message: str, code: str = "kernel", shows: Optional[Shows] = None) -> None:
        """``EmitterCore.check``; while a stack op runs on every device (``mask`` set), only the owner's check
        counts, since the other devices run it on zeros."""
        if self.mask is not None and not (is_static(ok) and bool(ok)):
            ok = jnp.asarray(ok, bool) | (self.idx != self.mask)
        super().check(ok, message, code, shows)

    def read_pred(self, env: Env, t: Tensor) -> Any:
        """A predicate every device agrees on: broadcast from its owner by a ``psum``, once per value."""
        v = env[key(t)]
        if v is DEAD or is_static(v) or t.node.id in self.fed or self.ndev == 1:
            return v
        hit = env.get(("shared", key(t)))
        if hit is not None and hit[0] is v:
            return hit[1]
        src = self.loc[t.node.id]
        # lax.select, not jnp.where (a nested jit call in the loop body)
        mine = jax.lax.select(self.idx == src, jnp.asarray(v).astype(jnp.int32), jnp.int32(0))
        shared = jax.lax.psum(mine, AXIS) != 0
        env[("shared", key(t))] = (v, shared)
        self.broadcasts += 1
        return shared

    def _everywhere(self, n: Node, env: Env) -> None:
        """Run a stack push or pop on every device, outside any branch.

        Why: in a branch, a stack's whole buffer would be an operand and a result of the
        conditional, copied at every push or pop. Run on every device, each device updates its own
        copy with the values it holds (the owner's are the real ones, the others' are zeros), the
        pointers stay equal everywhere, and only the owner's checks (overflow, underflow, the
        iteration index) count. Only the owner's copy is ever read back.
        """
        self._move_all(env, [(t, n) for t in n.inputs])
        view: Any = ChainMap({key(t): self._local(env, t, n) for t in n.inputs}, env)
        self.mask = self.loc[n.id]
        try:
            Emitter.run_node(self, n, view)
        finally:
            self.mask = None
        for k in [key(o) for o in n.outputs] + [(n.id, -1)]:
            if k in view.maps[0]:
                env[k] = view.maps[0][k]

    # -- batches of ops ------------------------------------------------------------------------------
    def run_items(self, items: list[Any], env: Env) -> None:
        """Trace ``items`` as batches: consecutive ops go into the open batch by their device until one reads what
        another device computes in it, and each batch runs as one ``lax.switch`` (``_flush``); a cond or loop flushes
        the batch and runs by the emitter's own rules."""
        self.take_static(env)
        batch: dict[int, list[Node]] = {}
        made: dict[Key, int] = {}  # outputs of the open batch -> the device computing them
        for it in items:
            if isinstance(it, (CondRegion, WhileRegion)):
                self._flush(batch, made, env)
                if isinstance(it, CondRegion):
                    self.run_cond(it, env)
                else:
                    self.run_while(it, env)
            elif it.id not in self.fed:
                self._schedule(it, env, batch, made)
        self._flush(batch, made, env)

    def _schedule(self, n: Node, env: Env, batch: dict[int, list[Node]], made: dict[Key, int]) -> None:
        """Run ``n`` now (known at trace time, an alias, a stack op) or add it to the open batch,
        flushing the batch first where ``n`` reads what another device computes in it."""
        if self._known(n, env, made):
            Emitter.run_node(self, n, env)  # known at trace time, the same on every device
        elif n.op in FORWARD and key(n.inputs[0]) not in made and not n.control_inputs:
            env[key(n.outputs[0])] = self.read(env, n.inputs[0], n)  # an alias on n's device
        elif n.op in STACK_OPS and self.ndev > 1:
            if any(key(t) in made for t in n.inputs):
                self._flush(batch, made, env)
            self._everywhere(n, env)
        else:
            d = self.loc[n.id]
            if any(made.get(key(t), d) != d for t in n.inputs):
                self._flush(batch, made, env)
            batch.setdefault(d, []).append(n)
            for o in n.outputs:
                made[key(o)] = d

    def _known(self, n: Node, env: Env, made: dict[Key, int]) -> bool:
        """Whether ``n`` is dead, or pure with inputs known at trace time: no device needs to run it."""
        ins = [env.get(key(t)) for t in n.inputs if key(t) not in made]
        dead = any(env.get((c.id, -1)) is DEAD for c in n.control_inputs) or any(x is DEAD for x in ins)
        pure = n.op not in STATEFUL
        return dead or (pure and all(key(t) not in made and no_leaves(env[key(t)]) for t in n.inputs))

    def _flush(self, batch: dict[int, list[Node]], made: dict[Key, int], env: Env) -> None:
        """Run the open batch: each device's ops in its own branch of one ``lax.switch``."""
        if not batch:
            return
        devs = sorted(batch)
        self._move_all(env, [(t, n) for d in devs for n in batch[d] for t in n.inputs if key(t) not in made])
        statics: Env = {}
        state0 = self.state
        sub0 = self._batch_state([n for d in devs for n in batch[d]], env)
        traced = {d: Traced(self._branch(batch[d], made, env, statics), sub0) for d in devs}
        self.state = state0
        shapes = {k: s for d in devs for k, s in traced[d].shapes[0].items()}
        self.batches += 1
        out, sub = self._switch(devs, traced, shapes, sub0)
        self.state = {**state0, **sub}
        env.update(out)
        env.update(statics)
        batch.clear()
        made.clear()

    def _batch_state(self, nodes: list[Node], env: Env) -> dict[str, Any]:
        """The state the batch's ops touch, and the error word: only that goes through the switch, so
        a gradient stack's buffer that no op of the batch uses is not copied through a branch."""
        touched, full = {"err"}, False
        for n in nodes:
            if n.op in STATEFUL:
                h = env.get(key(n.inputs[0]))
                if isinstance(h, Handle):
                    touched.add(f"{h.kind}:{h.name}")
                else:
                    full = True
        return dict(self.state) if full else {k: self.state[k] for k in touched if k in self.state}

    def _branch(self, nodes: list[Node], made: dict[Key, int], env: Env, statics: Env) -> Branch:
        """The branch of one device: its ops of the batch, on its copies of their inputs. Values known
        at trace time go to ``statics``; it returns the outputs that other devices or the fetches read."""
        ids = {n.id for n in nodes}

        def fn(state: Any) -> Any:
            self.state = dict(state)
            benv = dict(env)
            for n in nodes:
                for t in n.inputs:
                    if key(t) not in made:
                        benv[key(t)] = self._local(env, t, n)
            for n in nodes:
                Emitter.run_node(self, n, benv)
            return _jnp_tree(self._outputs(nodes, ids, benv, statics)), self.state

        return fn

    def _outputs(self, nodes: list[Node], ids: set[int], benv: Env, statics: Env) -> Env:
        """What a branch returns: outputs read outside it (by another device or as a fetch); the ones
        known at trace time, and the nodes' control outputs, go to ``statics`` instead."""
        outs = {}
        for n in nodes:
            if (n.id, -1) in benv:
                statics[(n.id, -1)] = benv[(n.id, -1)]
            for o in n.outputs:
                v = benv[key(o)]
                if no_leaves(v):
                    statics[key(o)] = v
                elif key(o) in self.fetch_set or self.readers.get(key(o), set()) - ids:
                    outs[key(o)] = v
        return outs

    def _switch(self, devs: list[int], traced: dict[int, Traced], shapes: dict[Key, Any],
                sub0: dict[str, Any]) -> Any:
        """The batch as one conditional on the mesh position: no conditional on a mesh of one, a
        ``lax.cond`` when one device has ops, else a ``lax.switch`` over every device."""
        if self.ndev == 1:
            return filled(traced[devs[0]], shapes)(sub0)
        if len(devs) == 1:
            return jax.lax.cond(self.idx == devs[0], filled(traced[devs[0]], shapes), filled(None, shapes), sub0)
        return jax.lax.switch(self.idx, [filled(traced.get(d), shapes) for d in range(self.ndev)], sub0)


__all__ = ["AXIS", "SpmdEmitter"]
