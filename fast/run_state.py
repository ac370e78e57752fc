"""What a run of the fast backend starts from and leaves behind: the lowest layer of ``FastBackend``.

A run starts from the Variables' device copies (the last run's, while the session's value is still
the one it wrote) and the gradient stack buffers the last run of its plan kept; it ends with its
fetches on the host (a dead one refused), the Variables written back, the buffers kept again, and
its error word read (``outcome.decode``). Every route of the backend — the stages, the fused
attempt, the ``Direct`` call — starts and ends so, and reads the same accounting of what the
backend holds between runs (``held_bytes``, ``stack_buffers``).

Why a layer of its own: these are the backend's *state*, which the routes above it share and none
of them owns (``fast.direct_call``, ``fast.fused_attempts``, ``fast.backend``).
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any, Optional

import jax
import numpy as np

from turnout.fast import stacks as stk
from turnout.fast.host_env import fetched
from turnout.fast.lane import write_variables
from turnout.fast.outcome import Outcome, enforce
from turnout.fast.plan import Plan
from turnout.fast.regions import Key
from turnout.fast.shell import BackendShell
from turnout.fast.state_keys import var_key
from turnout.fast.timeline import Timeline
from turnout.fast.variable_store import DeviceVariables, cached_copy, start_entry
from turnout.graph import Tensor

#: how errors of this backend name it (``outcome.decode``)
WHO = "fast backend"


class RunState(BackendShell):
    """The state a backend's runs share (made by ``FastBackend.__init__``, over the shell's,
    ``fast.shell``) and the first and last steps of every run over it."""

    #: run signature -> its plan (``FastBackend._plan``)
    _plans: dict[Any, Plan]
    #: name -> (the session's entry for the Variable, its device copy): the copy a run starts from
    #: while the entry is still the one it stands for (``_device_var``)
    _dev_vars: dict[str, tuple[Any, Any]]
    #: id of a plan -> the stack buffers its last run kept
    _stack_bufs: dict[int, dict[str, stk.StackValue]]
    #: ``session.variables``: a run's new values stay on the device until read
    variable_store: DeviceVariables
    #: the trace of the run in progress (``trace=True``)
    _timeline: Optional[Timeline]
    def held_bytes(self) -> int:
        """Device bytes this backend holds between runs: kept gradient stack buffers and the device
        copies of Variables."""
        stacks = sum(stk.stack_nbytes(v) for bufs in self._stack_bufs.values() for v in bufs.values())
        return stacks + sum(int(dev.nbytes) for _, dev in self._dev_vars.values())

    def stack_buffers(self) -> list[dict[str, Any]]:
        """The gradient stack buffers this backend keeps between runs, per plan (rung) holding them:
        ``capacity`` (entries per stack), ``ladder`` (the capacities of the ladder that rung belongs
        to, ``capacity_ladder``; None for a plan not run on one) and ``stacks`` (stack key -> bytes
        kept: the value buffer, and after a staged run its index record). ``held_bytes`` counts them.

        Why: how stacks are sized is a policy (``FastOptions.stack_ladder``, ``stack_first_rung``,
        ``stack_rung_ratio``) whose effect a user, a test or a benchmark checks from the backend's own
        accounting, not from the process's memory."""
        plans = {id(p): p for p in self._plans.values()}
        tops = {id(r): top for top in self._plans.values() for r in top.rungs.values()}
        out = []
        for pid, bufs in self._stack_bufs.items():
            plan, top = plans.get(pid), tops.get(pid)
            out.append({"capacity": None if plan is None else plan.capacity,
                        "ladder": None if top is None or top.ladder is None else list(top.ladder),
                        "stacks": {k: stk.stack_nbytes(v) for k, v in bufs.items()}})
        return out

    def release_buffers(self) -> None:
        """Free the device buffers held between runs (see ``held_bytes``). Compiled plans are kept;
        the next run allocates its stacks afresh and copies Variables from the session again."""
        self._stack_bufs.clear()
        self._dev_vars.clear()
        self.variable_store.settle()

    def _span(self, name: str, track: str, **args: Any) -> AbstractContextManager[dict[str, Any]]:
        """A timeline span while tracing; otherwise nothing: a fresh dict for the caller's span
        arguments, which it writes into (one dict shared by every run would be module state that
        each run changes)."""
        tl = self._timeline
        return tl.span(name, track, **args) if tl is not None else nullcontext({})

    def _device_var(self, plan: Plan, name: str, variables: dict[str, np.ndarray]) -> Any:
        """The device copy of Variable ``name`` a run starts from: the one the last run handed back while
        the session's host value is still the one it wrote, else the host value (its initial value the
        first time) put on the device, committed as a run's outputs are, or the next run compiles again.
        ``jax.device_put``, not ``jnp.asarray``: the latter compiles a small copy program for every new
        shape (about 35 ms each on the development machine, so a model's first run paid it once per
        Variable shape); ``device_put`` copies the host array as it is.

        A copy the last run handed back is committed too where it was not: a compiled call none of
        whose arguments was committed (an initializer, which takes none) returns uncommitted arrays,
        and a training step started from them compiled for them, then again for the committed ones
        its own outputs are (for the imported TF1 LSTM step of ``benchmarks/tf_session.py``, run
        after its initializer: a first run of 4.95 s against 2.76 s)."""
        dev = cached_copy(self._dev_vars, name, start_entry(variables, plan.var_nodes[name]))
        if dev is None:
            return stk.committed(jax.device_put(variables[name]))
        return dev if getattr(dev, "committed", True) else stk.committed(dev)

    def _initial_state(self, plan: Plan, variables: dict[str, np.ndarray], fused: bool = False) -> dict[str, Any]:
        """The state a run starts from: the error word, the Variables' device copies, the stacks (the
        last run's buffers, donated: no allocation; entries above the pointer are never read, as
        [E-Stack-Pop] reads only what this run pushed). For the fused stage (``fused``) there is no
        error word, and a kept stack is its value buffer alone: the stage sets the error word and
        the pointers to 0 and makes the index records itself (``Plan._segment``)."""
        # numpy scalars, not jnp: a jnp scalar is an eager dispatch (tens of microseconds) per value,
        # and the compiled stages take numpy leaves as the same int32 / bool arguments
        state: dict[str, Any] = {} if fused else {"err": np.int32(0)}
        for name in plan.var_nodes:
            state[var_key(name)] = self._device_var(plan, name, variables)
        reuse = self._stack_bufs.pop(id(plan), {})
        for k, dtype, shapes in plan.stack_slots:
            if shapes is None:
                state[k] = stk.StackValue(plan.capacity, dtype)
                continue
            if fused and k in plan.inside:  # (made inside the call)
                continue
            buf, idx = stk.kept_arrays(reuse.get(k))
            if buf is None:
                buf = stk.device_zeros((plan.capacity, *shapes[0]), dtype)
            if fused:
                state[k] = buf
                continue
            if idx is None:  # (kept by the fused stage, which keeps no index record)
                idx = stk.device_zeros((plan.capacity, *shapes[1]), np.int32)
            state[k] = stk.StackValue(plan.capacity, dtype, buf, idx, np.int32(0))
        return state

    @staticmethod
    def _kept_stacks(plan: Plan, state: dict[str, Any]) -> dict[str, Any]:
        """The stacks of ``state`` kept for the next run of ``plan``: those it preallocates, as a
        ``StackValue`` (after the stages) or a value buffer alone (after the fused stage)."""
        return {k: state[k] for k in plan.kept if k in state and stk.kept_arrays(state[k])[0] is not None}

    def _finish(self, plan: Plan, fetches: list[Tensor], env: dict[Key, Any], lives: dict[Key, Any],
                state: dict[str, Any], variables: dict[str, np.ndarray]) -> list[Any]:
        """The fetched values on the host, and the Variables written back: the last step of a run."""
        values = fetched(fetches, env, lives)
        if plan.prealloc and self.options.keep_stack_buffers:
            self._stack_bufs[id(plan)] = self._kept_stacks(plan, state)
        else:
            self._stack_bufs.pop(id(plan), None)
        names = list(plan.var_nodes)
        write_variables(tuple((name, name in plan.written_vars, None) for name in names),
                        [state[var_key(name)] for name in names], values, variables, self._dev_vars)
        return values

    def _run_stats(self, plan: Plan, stages: int, fused: bool, seconds: list[float],
                   stacks: dict[str, Any]) -> dict[str, Any]:
        """The stats of a run of ``plan`` on the general path, the fused attempt's or the stages':
        ``stages`` compiled stages (1 for the fused call), their ``seconds``, the stacks' accounting
        (``ChunkStore.stats`` or ``DeviceStacks.stats``) and the checkpoint slots'."""
        return {"backend": "fast", "compiles": self.compile_count, "stages": stages, "fused": fused,
                "stack_capacity": plan.capacity, "stage_seconds": seconds, **stacks, **plan.slots.stats}

    @staticmethod
    def _decode(plan: Plan, code: int, swapped: int = 0, attempt: bool = False, mark: int = 0) -> Outcome:
        """What error word ``code`` (and, for an attempt, high-water mark ``mark``) of a call of
        ``plan`` means (``outcome.decode``)."""
        return plan.outcome_of(code, WHO, swapped, attempt, mark)

    def _raise_errors(self, plan: Plan, code: int) -> None:
        """The error word of a Direct call acted on: its error raised. (A Direct plan has no gradient
        stacks, so its word never asks for a retry and no stack chunk moved; the stages return theirs,
        ``fast.runner``.)"""
        enforce(self._decode(plan, int(code)))
