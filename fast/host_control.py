"""The host's conds and loops: steps of a run whose nodes span devices.

Why a module of its own: a cond or a loop whose nodes sit on several devices cannot be one compiled
call; the host decides it, reading the one value it must (the predicate) and running the steps of the
taken side (``fast.cut``: ``HostCond``, ``HostLoop``). That is the paper's Switch, Merge, Enter,
NextIteration and Exit done on the host's environment (``fast.host_env``), one decision at a time, by
the wiring the emitter applies inside a trace (``fast.plumbing``); the segment calls between the
decisions are the run's (``fast.runner``), which mixes this class in.

For a loop, the host also bounds the iterations in flight by its ``parallel_iterations``: before
dispatching iteration i it waits for the error words of iteration ``i - P`` (``_retire``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Optional

import jax
import numpy as np

from turnout.errors import NonTerminationError, describe_node, runaway_message
from turnout.fast import plumbing
from turnout.fast.cut import HostCond, HostLoop, Segment, Step
from turnout.fast.host_env import HostEnv, Lazy, abstract, resolved, switched
from turnout.fast.outcome import Retry
from turnout.fast.regions import Key, cond_exports, cond_outputs, key, pred_reader
from turnout.fast.values import DEAD, wrap_static
from turnout.kernels import truth

if TYPE_CHECKING:
    from turnout.fast.device_stacks import DeviceStacks
    from turnout.fast.regions import Program
    from turnout.fast.timeline import Timeline


class HostControl:
    """The host's conds and loops of one run (mixed into ``fast.runner.StepRunner``, which has the
    state, the segment calls and the attributes declared here)."""

    program: Program
    tl: Optional[Timeline]
    stacks: DeviceStacks
    jdev: dict[str, Any]
    state: dict[str, dict[str, Any]]
    #: the innermost host loop's iteration, for trace labels; the iterations run per loop name
    iteration: int
    host_iterations: dict[str, int]
    max_iter_py: Optional[int]
    pools: dict[str, Any]
    last_fut: dict[str, Future[Any]]
    #: the run's first ``Retry``: from then on no step runs and every cond and loop returns at once
    retry: Optional[Retry]
    steps: Callable[[list[Step], HostEnv], None]
    on_workers: Callable[[Callable[[], None]], None]
    _retire: Callable[[list[Any]], None]
    #: a segment's compiled function (``SegmentFn``), made on first use, and the iteration bound its calls take
    fn_of: Callable[[Segment], Any]
    max_iter: Any

    def cond(self, hc: HostCond, env: HostEnv) -> None:
        """A cond whose branches span devices: the host reads the predicate, runs the taken branch's
        steps, and joins its Merges and exports into ``env`` (all dead for a dead predicate)."""
        r = hc.region
        p = resolved(env.vals[key(r.pred)])
        exports = cond_exports(r, self.program.fetch_keys)
        if p is DEAD:
            env.wire(plumbing.dead(cond_outputs(r, exports)), env)
            return
        t0 = self.tl.now() if self.tl is not None else 0.0
        b = truth(p, lambda: describe_node(pred_reader(r)))  # the one value the host must read
        if self.tl is not None:
            self.tl.host(f"read predicate of {r.describe()}", t0, value=b)
        benv = switched(env, r.switches, int(b))
        self.steps(hc.branches[b], benv)
        if self.retry is None:
            self._join(hc, b, benv, env, exports)

    @staticmethod
    def _join(hc: HostCond, b: bool, benv: HostEnv, env: HostEnv, exports: list[Key]) -> None:
        """Branch ``b``'s results into ``env``: each Merge forwards the input of that branch (and its
        index), or is dead where the branch has none; an export the branch did not make is dead."""
        env.wire(plumbing.join_wires(hc.region, b), benv)
        for k in exports:
            if k in benv.vals:
                env.take(k, benv, k)
            else:
                env.set(k, DEAD, None)

    def loop(self, hl: HostLoop, env: HostEnv) -> None:
        """A loop whose body spans devices, driven by the host one iteration at a time: the header's
        steps, a read of the predicate, the body's steps; then the exit side, into ``env``. The loop
        variables stay where they are between iterations, and at most ``parallel_iterations``
        iterations run ahead of the ones whose error words have been read."""
        r = hl.region
        base, vals = self._entered(hl, env)
        if any(v is DEAD for v, _ in vals):
            env.wire(plumbing.dead(plumbing.exit_keys(r)), env)
            return
        outer_iteration = self.iteration
        henv, iters = self._iterate(hl, base, vals)
        self.iteration = outer_iteration
        if self.retry is not None:
            return
        if iters == 0 and hl.pushes:
            self.learn_unrun(hl.body, switched(henv, r.switches, 1))
        if hl.pushes:
            self.on_workers(lambda: self.stacks.loop_ended(hl.pushes))
        name = str(r.frame[-1])
        self.host_iterations[name] = self.host_iterations.get(name, 0) + iters
        eenv = switched(henv, r.switches, 0)
        self.steps(hl.exit_side, eenv)
        env.wire(plumbing.exit_wires(r), eenv)

    def learn_unrun(self, steps: list[Step], env: HostEnv) -> None:
        """Trace, without running them, the segments of ``steps``: the body of a loop that pushes
        stacks and ran no iteration (a segment traced before is not traced again: JAX keeps the
        trace of each layout and type of its arguments). Why: a plan's traces learn the constants
        a stack's only push pushes (a forward value's shape, ``Emitter.note_push``), and a gradient
        step traced later pops them as constants (the shape of a ``Fill`` must be known when
        compiling); every push is traced before its pops on every other route, where a loop's body
        is traced whatever its trip count. Best effort: a trace that fails teaches nothing and
        changes nothing of the run (the body never runs), so its error is dropped."""
        try:
            self._learn_steps(steps, env)
        except Exception:  # noqa: BLE001 (see above: an unreached body's trace must not fail the run)
            return

    def _learn_steps(self, steps: list[Step], env: HostEnv) -> None:
        """``learn_unrun``'s walk: each segment traced on the abstract values before it, each cond's
        branches and each loop's header, body and exit side once, joined as a run would."""
        for s in steps:
            if isinstance(s, HostCond):
                for b, branch in s.branches.items():
                    benv = switched(env, s.region.switches, int(b))
                    self._learn_steps(branch, benv)
                self._join(s, b, benv, env, cond_exports(s.region, self.program.fetch_keys))
            elif isinstance(s, HostLoop):
                henv = self._enter_iteration(s, *self._entered(s, env), first=True)
                self._learn_steps(s.header, henv)
                self._learn_steps(s.body, switched(henv, s.region.switches, 1))
                eenv = switched(henv, s.region.switches, 0)
                self._learn_steps(s.exit_side, eenv)
                env.wire(plumbing.exit_wires(s.region), eenv)
            elif s.driven is None:
                fn = self.fn_of(s)
                env_in = {k: wrap_static(abstract(env.vals[k])) for k in s.reads if k in env.vals}
                out, _, _ = fn.trace(env_in, abstract(self.state[s.device]), self.max_iter)
                for k, v in out.items():
                    env.set(k, v, s.device)

    @staticmethod
    def _entered(hl: HostLoop, env: HostEnv) -> tuple[HostEnv, list[tuple[Any, Optional[str]]]]:
        """Loop ``hl`` entered from ``env``: the scope of its iterations (its invariants wired in) and
        its loop variables' entry values with the devices they are on."""
        base = env.child()
        base.wire(plumbing.invariant_wires(hl.region), env)
        return base, [(resolved(env.vals[key(t)]), env.where.get(key(t))) for t, _ in plumbing.entries(hl.region)]

    def _iterate(self, hl: HostLoop, base: HostEnv, vals: list[tuple[Any, Optional[str]]]) -> tuple[HostEnv, int]:
        """Run iterations until the predicate is false, or until the run's ``Retry``: the environment
        of the last header (where the exit side starts) and the number of iterations run."""
        r = hl.region
        window: deque[list[Any]] = deque()
        depth = max(1, int(r.parallel_iterations))
        iters = 0
        while True:
            henv = self._enter_iteration(hl, base, vals, first=iters == 0)
            self.iteration = iters
            self.steps(hl.header, henv)
            if self.retry is not None or not self._go(hl, henv, iters):
                return henv, iters
            if self.max_iter_py is not None and iters >= self.max_iter_py:
                raise NonTerminationError(runaway_message(r.describe(), self.max_iter_py))
            while len(window) >= depth:  # at most parallel_iterations iterations in flight
                self._retire(window.popleft())
            benv = switched(henv, r.switches, 1)
            self.steps(hl.body, benv)
            if self.retry is not None:
                return henv, iters
            vals = [(benv.vals[key(t)], benv.where.get(key(t))) for t, _ in plumbing.next_values(r)]
            if self.pools:
                window.append([self.last_fut[d] for d in hl.devices if d in self.last_fut])
            else:
                window.append([self.state[d]["err"] for d in hl.devices])
            iters += 1

    def _enter_iteration(self, hl: HostLoop, base: HostEnv, vals: list[tuple[Any, Optional[str]]],
                         first: bool) -> HostEnv:
        """One iteration's environment: each loop variable's Merge holds its value (from the Enter at
        the first iteration, from the NextIteration after) and which input it came from."""
        henv = base.child()
        for (kv, ki, idx), (v, w) in zip(plumbing.merge_outputs(hl.region, first), vals, strict=True):
            if isinstance(v, (np.ndarray, np.generic)):
                # a loop variable known on the host enters as a device value, so the segments are
                # traced once for the loop, not once per value
                v, w = jax.device_put(np.asarray(v), self.jdev[hl.home]), hl.home
            elif isinstance(v, Lazy):
                v = Lazy(v.fut, v.k, data=True)
            henv.set(kv, v, w)
            henv.set(ki, idx, None)
        return henv

    def _go(self, hl: HostLoop, henv: HostEnv, iters: int) -> bool:
        """The host reads the predicate, and nothing else; the LoopCond forwards it."""
        r = hl.region
        pkey = key(r.loop_cond.inputs[0])
        pred = resolved(henv.vals[pkey])
        t0 = self.tl.now() if self.tl is not None else 0.0
        go = pred is not DEAD and truth(pred, lambda: describe_node(r.loop_cond))
        if self.tl is not None:
            self.tl.host(f"read predicate of {r.describe()}", t0, iteration=iters, value=go)
        henv.take(key(r.loop_cond.outputs[0]), henv, pkey)
        return go



__all__ = ["HostControl"]
