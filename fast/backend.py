"""``FastBackend``: ``tn.Session(graph, backend="fast")``.

Why stages: a program without gradient stacks is one ``jax.jit`` function — the whole root frame,
with its conds and loops as ``lax`` control flow. A top-level loop that pushes or pops a gradient stack
is instead *driven* (see ``stacks``): compiled so that one call runs at most a chunk of iterations, and
re-entered by a Python loop that hands full stack buffers to a ``stacks.ChunkStore`` (to host memory
for a loop with ``swap_memory=True``, kept on the device otherwise) and takes them back for the
backward loop. The root frame is therefore
cut into stages — compiled segments and driven loops — that pass values to each other.

Why a fused stage too: the staged path costs a few jitted calls and Python driving per run (2 to 3
ms for a small LSTM step), which dominates small models. A plan with driven loops therefore also
has ``Plan.fused`` — the whole root frame as ONE compiled stage, every loop a plain ``lax`` loop —
and a run tries it first. It cannot swap: a push beyond the chunk sets the error word (``overflow``),
the loops that push or pop stop there, and the attempt is discarded (no Variable update, no error
raised) and the staged path runs from the start. Each path is compiled by the first run that needs
it (a plan whose loops fit their chunk never compiles the staged path; the first run that overflows
does, once; ``precompile_staged=True`` compiles both on the first run), and a run right after a
staged run that swapped skips the attempt: an overflowing attempt wastes at most one chunk of
iterations, and runs of long loops in a row waste nothing after the first.

Compiled plans are cached per (graph identity and edits — ``Graph.edits``: appending nodes keeps a
plan valid —, fetches, feed signature, variable signature, stack capacity); a stage is retraced only
when one of those changes, so new fed values and new trip counts (a fed ``N``) never recompile what
was compiled (the one exception is the staged path of a plan with gradient stacks, compiled by the
first run whose loop outgrows its chunk unless ``precompile_staged``). ``compile_count`` counts
traces, for tests.

Per-run cost (see ``docs/benchmarks.rst``): a plan of one compiled stage without gradient stacks runs
on the ``Direct`` path — one jitted call on the fed numpy arrays, one read-back of the error word and
live flags. Gradient stacks whose pushes have static shapes are allocated before the first stage and
passed to every stage as a separate, *donated* argument, so the compiled stages update them in place;
after a successful run their buffers are kept for the next run of the same plan (the pointer is reset,
and entries above it are never read), so steady-state runs allocate no stack memory. The price: the
backend holds ``stack_chunk`` entries per stack between runs.

How device partitions plug in: the fast partitioned executor (``turnout.devices.fast_executor``) runs a
graph placed on one device as this backend, and otherwise cuts the unpartitioned region tree by device
and compiles each device's regions with the same ``Emitter``; a cluster task runs a partition that
sends and receives nothing as this backend, whole (``turnout.devices.compiled_partition``).

Errors keep the reference backend's types: kernel failures detected in compiled code (integer division
by zero, out-of-range TensorArray reads) are recorded in an error word and raised as ``KernelError``
after the stage; ``RunOptions.max_iterations`` is enforced by the compiled loops' iteration counters
(``NonTerminationError``); a fetch whose branch did not run raises ``DeadFetchError``.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np

from turnout.errors import DeadFetchError, KernelError, NonTerminationError, ResourceExhaustedError, UnsupportedError
from turnout.fast import stacks as stk
from turnout.fast.deep import DEEP_NESTING, NeedsDeep, call_deep, on_deep_thread
from turnout.fast.emit import Emitter, ErrorCodes, stack_key, stack_source, var_key
from turnout.fast.functionalize import functionalize
from turnout.fast.lowering import NeedsStatic
from turnout.fast.regions import CondRegion, Item, Key, Program, WhileRegion, item_nodes, key, nesting, program_nodes
from turnout.fast.timeline import Timeline
from turnout.fast.values import DEAD, TA, Handle, to_host, wrap_static
from turnout.graph import Graph, Node, Tensor
from turnout.session import RunOptions, RunResult

_INT32_MAX = 2**31 - 1
_INT32_MAX_NP = np.int32(_INT32_MAX)
#: RunOptions' default firing budget: a guard the user did not choose, which compiled code (counting
#: iterations, not firings) leaves to max_iterations; any other budget is rejected, never ignored
_DEFAULT_MAX_FIRINGS = RunOptions.max_firings
_MAX_CAPACITY = 1 << 24


_NO_SPAN: AbstractContextManager[dict[str, Any]] = nullcontext({})


class _Retry(Exception):
    """A nested loop's stack outgrew its chunk: run again with twice the capacity."""


@dataclass
class Stage:
    """A compiled segment of root items, or one driven (chunked) top-level loop."""

    items: list[Item]
    reads: list[Key]
    writes: list[Key] = field(default_factory=list)
    driven: Optional[WhileRegion] = None
    push_stacks: dict[str, int] = field(default_factory=dict)  # stack key -> pushes per iteration (static)
    pop_stacks: dict[str, int] = field(default_factory=dict)
    fns: dict[str, Any] = field(default_factory=dict)
    passthrough: set[Key] = field(default_factory=set)  # set while tracing a segment, see segment_fn


def _direct_counts(items: list[Item], op: str) -> dict[str, int]:
    """StackPush / StackPop nodes per stack in one iteration of a loop body, conds included, nested
    loops not (those are measured at run time, see ``stacks``)."""
    out: dict[str, int] = {}
    for it in items:
        if isinstance(it, Node) and it.op == op:
            src = stack_source(it.inputs[0])
            if src is not None:
                out[f"stack:{src.id}"] = out.get(f"stack:{src.id}", 0) + 1
        elif isinstance(it, CondRegion):
            for b in (False, True):
                for k, v in _direct_counts(it.branches[b], op).items():
                    out[k] = out.get(k, 0) + v  # an upper bound: at most one branch runs
    return out


def _all_stacks(nodes: list[Node], op: str) -> set[str]:
    out = set()
    for n in nodes:
        if n.op == op:
            src = stack_source(n.inputs[0])
            if src is not None:
                out.add(f"stack:{src.id}")
    return out


class Plan:
    """Everything compiled for one (graph version, fetches, feed signature, capacity)."""

    def __init__(self, backend: FastBackend, program: Program, fed: set[int], capacity: int) -> None:
        self.backend = backend
        self.program = program
        self.fed = fed
        self.capacity = capacity
        self.codes = ErrorCodes()
        self.fed = fed
        nodes = program_nodes(program)
        self.var_nodes = {n.attrs["var_name"]: n for n in nodes if n.op == "VarHandle"}
        self.written_vars = {stack_source_var(n) for n in nodes if n.op.startswith("Assign")} - {None}
        self.stack_nodes = [n for n in nodes if n.op == "StackNew"]
        self.stack_info = _stack_info(self.stack_nodes, nodes)
        self.prealloc = _static_stack_shapes(nodes)
        self.nesting = nesting(program.items)
        self.stages = self._stages()
        self.fused = self._fused_stage() if any(st.driven is not None for st in self.stages) else None
        self.fused_warm = False  # the fused stage has run once
        # the capacity ladder of the fused attempt (``FastBackend._run_fused_sized``): the plans of the
        # same program at lower capacities, this one last, and the rung that held the last run
        self.rungs: Optional[list[Plan]] = None
        self.rung: Optional[Plan] = None
        # the last staged run swapped stack chunks: the next run most likely overflows a chunk too, so
        # it skips the fused attempt (a loop of a million iterations would not fit either time)
        self.predict_overflow = False

    def _stages(self) -> list[Stage]:
        stages: list[Stage] = []
        seg: list[Item] = []
        for it in self.program.items:
            if isinstance(it, WhileRegion) and any(n.op in ("StackPush", "StackPop") for n in it.nodes):
                if seg:
                    stages.append(Stage(seg, []))
                    seg = []
                st = Stage([it], [], driven=it)
                pushes = _all_stacks(it.nodes, "StackPush")
                pops = _all_stacks(it.nodes, "StackPop")
                direct_push = _direct_counts(it.body, "StackPush")
                direct_pop = _direct_counts(it.body, "StackPop")
                st.push_stacks = {s: direct_push.get(s, 0) for s in pushes}
                st.pop_stacks = {s: direct_pop.get(s, 0) for s in pops}
                stages.append(st)
            else:
                seg.append(it)
        if seg or not stages:
            stages.append(Stage(seg, []))
        fetch = set(self.program.fetch_keys)
        produced: list[set[Key]] = []
        for st in stages:
            ns = [n for it in st.items for n in item_nodes(it)]
            ids = {n.id for n in ns}
            produced.append({key(o) for n in ns for o in n.outputs})
            st.reads = sorted({key(t) for n in ns for t in n.inputs if t.node.id not in ids or t.node.id in self.fed}
                              | {key(o) for n in ns if n.id in self.fed for o in n.outputs})
        for i, st in enumerate(stages):
            later = set().union(*(set(s.reads) for s in stages[i + 1:])) | fetch
            st.writes = sorted(produced[i] & later)
        return stages

    def _fused_stage(self) -> Stage:
        """The whole root frame as one compiled stage, driven loops included as plain ``lax``
        loops: the fast path of a program with gradient stacks whose pushes all fit their chunk.

        Why: the staged path costs several jitted calls and Python driving per run (milliseconds),
        which dominates small models. The fused stage cannot swap: a push beyond the chunk sets the
        error word (``overflow``), the loops that push or pop stop there (``Emitter.stop_on_error``),
        and ``FastBackend._run_fused`` discards the attempt — values, Variables, errors — and runs
        the staged path instead.
        """
        ns = program_nodes(self.program)
        ids = {n.id for n in ns}
        reads = sorted({key(t) for n in ns for t in n.inputs if t.node.id not in ids or t.node.id in self.fed}
                       | {key(o) for n in ns if n.id in self.fed for o in n.outputs})
        produced = {key(o) for n in ns for o in n.outputs}
        return Stage(list(self.program.items), reads, sorted(produced & set(self.program.fetch_keys)))

    @property
    def direct_ok(self) -> bool:
        return (not self.no_direct and len(self.stages) == 1 and self.stages[0].driven is None
                and not self.stack_nodes)

    no_direct = False
    #: fed tensors this plan is specialised on, with their values (``lowering.NeedsStatic``)
    static_feeds: dict[Key, Any] = {}

    # ---- compiled functions ---------------------------------------------------------------------
    @property
    def has_loops(self) -> bool:
        """Whether the program has a loop: only then does a run's ``max_iterations`` reach the
        compiled code (a loop-free ``Direct`` function takes no bound argument)."""
        return any(n.op == "LoopCond" for n in program_nodes(self.program))

    def direct_fn(self, feed_keys: tuple[Key, ...], fetch_keys: tuple[Key, ...],
                  var_names: tuple[str, ...]) -> Any:
        """``f(feed values, variable values[, max_iter]) -> (fetched, [error word, *live flags],
        variables)``, the single stage of ``segment_fn`` with flat tuples in and out (see ``Direct``).
        A program without loops takes no ``max_iter``: every argument costs the call's dispatch
        a few microseconds, which is what a small program's run is made of."""
        st = self.stages[0]
        loops = self.has_loops

        def direct(feed_vals: tuple[Any, ...], var_vals: tuple[Any, ...], max_iter: Any) -> Any:
            # a numpy 0, not a traced one: it stays a constant (and ``flags`` goes) unless a check sets it
            state: dict[str, Any] = {"err": np.int32(0)}
            state.update({var_key(n): v for n, v in zip(var_names, var_vals, strict=True)})
            em = self.emitter(state, max_iter)
            env: dict[Key, Any] = dict(zip(feed_keys, feed_vals, strict=True))
            em.run_items(st.items, env)
            vals = tuple(env[k] for k in fetch_keys)
            if any(v is DEAD or isinstance(v, (TA, Handle)) for v in vals):
                raise _NotDirect()
            # the error word and the live flags in one int32 vector: one read-back instead of one each;
            # none at all when tracing shows no error can be raised and every fetch is live (no check
            # is left to run, so the run reads back only its fetches, as a JAX function would)
            err = em.state["err"]
            lives = [em.lives.get(k, True) for k in fetch_keys]
            if _is_zero(err) and all(live is True for live in lives):
                flags = None
            else:
                flags = jnp.stack([jnp.asarray(err, jnp.int32)] + [jnp.asarray(live, jnp.int32) for live in lives])
            return vals, flags, tuple(em.state[var_key(n)] for n in var_names)

        if loops:
            return jax.jit(direct)
        return jax.jit(lambda feed_vals, var_vals: direct(feed_vals, var_vals, _INT32_MAX_NP))

    def emitter(self, state: dict[str, Any], max_iter: Any) -> Emitter:
        self.backend.compile_count += 1  # runs only while tracing
        em = Emitter(self.program, self.codes, self.capacity, max_iter)
        em.state = dict(state)
        em.fed = self.fed
        em.static = self.static_feeds
        return em

    def segment_fn(self, st: Stage, fused: bool = False) -> Any:
        fetch = set(self.program.fetch_keys)

        def seg(env_in: dict[Key, Any], state: dict[str, Any], stacks: dict[str, Any], max_iter: Any) -> Any:
            em = self.emitter({**state, **stacks}, max_iter)
            em.stop_on_error = fused
            env = dict(env_in)
            em.run_items(st.items, env)
            # A value that leaves the stage as it came in (a fed tensor read by later stages) is not
            # returned: returning it would copy it; the caller's env still holds it.
            st.passthrough = {k for k in st.writes if k in env_in and env[k] is env_in[k]}
            out = {k: wrap_static(env[k]) for k in st.writes if k not in st.passthrough}
            lives = {k: jnp.asarray(em.lives.get(k, True)) for k in st.writes if k in fetch}
            return out, lives, em.state

        return jax.jit(seg, donate_argnums=(2,))

    def loop_fns(self, st: Stage) -> tuple[Any, Any, Any]:
        r = st.driven
        assert r is not None
        cap = self.capacity

        def init(env_in: dict[Key, Any], state: dict[str, Any], stacks: dict[str, Any], max_iter: Any) -> Any:
            em = self.emitter({**state, **stacks}, max_iter)
            start, body, _ = em.while_fns(r, dict(env_in))
            c0 = start(em.state)
            if c0 is None:  # the loop does not run: hand the (donated) state back for ``finish``
                return None, em.state
            from turnout.fast.emit import _jnp_tree

            return em.discover(body, _jnp_tree(c0), r)[0], None

        def chunk(env_in: dict[Key, Any], c_rest: Any, stacks: dict[str, Any], aux: Any, max_iter: Any,
                  host_has: dict[str, Any]) -> Any:
            c = _join_carry(c_rest, stacks)
            em = self.emitter(c[2], max_iter)
            _, body, _ = em.while_fns(r, dict(env_in))

            def ptrs(state: dict[str, Any]) -> dict[str, Any]:
                return {s: (jnp.int32(0) if state[s].pending else state[s].ptr)
                        for s in set(st.push_stacks) | set(st.pop_stacks)}

            def cond(ca: Any) -> Any:
                (vals, pred, state, iters), (grow, shrink) = ca
                ok = jnp.asarray(pred) & (iters < max_iter) & (state["err"] == 0)
                p = ptrs(state)
                for s, n in st.push_stacks.items():
                    ok &= p[s] + jnp.maximum(n, grow[s]) <= cap
                for s, n in st.pop_stacks.items():
                    ok &= (p[s] >= jnp.maximum(n, shrink[s])) | ~host_has[s]
                return ok

            def body2(ca: Any) -> Any:
                c, (grow, shrink) = ca
                before = ptrs(c[2])
                c2 = body(c)
                after = ptrs(c2[2])
                grow = {s: jnp.maximum(grow[s], after[s] - before[s]) for s in grow}
                shrink = {s: jnp.maximum(shrink[s], before[s] - after[s]) for s in shrink}
                return c2, (grow, shrink)

            return jax.lax.while_loop(cond, body2, (c, aux))

        def finish(env_in: dict[Key, Any], c_rest: Any, stacks: dict[str, Any], state: dict[str, Any],
                   max_iter: Any) -> Any:
            c = None if c_rest is None else _join_carry(c_rest, stacks)
            em = self.emitter(c[2] if c is not None else {**state, **stacks}, max_iter)
            _, _, fin = em.while_fns(r, dict(env_in))
            out_env: dict[Key, Any] = {}
            fin(c, out_env)
            return {k: wrap_static(out_env[k]) for k in st.writes}, em.state

        # The stack buffers are donated: each call updates them in place instead of copying every
        # buffer in and out (``Plan`` docstring).
        return (jax.jit(init, donate_argnums=(2,)), jax.jit(chunk, donate_argnums=(2,)),
                jax.jit(finish, donate_argnums=(2,)))


class _NotDirect(Exception):
    """A fetched value is not a plain array (a TensorArray, a handle, a value dead at trace time):
    the plan takes the general staged path instead."""


@dataclass
class Direct:
    """The one-call path of a plan with a single compiled stage and no gradient stacks.

    Why: for small programs the per-run Python work of the general path (building env and state
    dicts, ``jnp.asarray`` of every feed and scalar — each an eager dispatch of tens of
    microseconds —, reading the error word, the live flags and the outputs back one by one) costs more
    than the computation. Here everything that depends only on (graph version, fetches, feed
    signature, variable signature) is fixed once; a run is one jitted call on the fed numpy arrays and
    one ``np.asarray`` per output.
    """

    plan: Plan
    fn: Any
    feed_keys: tuple[Key, ...]
    var_names: tuple[str, ...]
    written: tuple[bool, ...]
    bounded: bool  # ``fn`` takes the run's max_iterations (the program has loops)
    #: the stats of every run on this path but its ``stage_seconds`` (copied, never shared)
    stats: dict[str, Any] = field(default_factory=dict)


def _is_zero(v: Any) -> bool:
    """Whether an error word is known to be 0 while tracing (a constant, not a traced value)."""
    if isinstance(v, jax.core.Tracer):
        return False
    try:
        return int(np.asarray(v)) == 0
    except (TypeError, ValueError):
        return False


def _static_stack_shapes(nodes: list[Node]) -> dict[int, tuple[tuple[int, ...], tuple[int, ...]]]:
    """StackNew id -> (element shape, index shape), for stacks whose every push has fully static
    shapes. Those stacks are allocated before the first stage (and their buffers reused by the next
    run), instead of materialized at their first push while tracing."""
    shapes: dict[int, Any] = {}
    for n in nodes:
        if n.op != "StackPush":
            continue
        src = stack_source(n.inputs[0])
        if src is None:
            continue
        v, i = n.inputs[2].shape, n.inputs[1].shape
        ok = v is not None and i is not None and all(isinstance(d, int) for d in (*v, *i))
        got = (tuple(v), tuple(i)) if ok and v is not None and i is not None else None
        shapes[src.id] = got if shapes.get(src.id, got) == got else None
    return {k: v for k, v in shapes.items() if v is not None}


def _stack_info(stack_nodes: list[Node], nodes: list[Node]) -> dict[str, stk.StackInfo]:
    """Stack key -> its forward loop's name, how errors name it (with the user's source line of the
    loop, from its Enter nodes) and its ``swap_memory``, read from the ``StackNew`` attrs."""
    sources: dict[str, str] = {}
    for n in nodes:
        if n.op == "Enter" and n.source and n.attrs.get("frame_name") not in sources:
            sources[n.attrs["frame_name"]] = n.source
    out = {}
    for sn in stack_nodes:
        a = sn.attrs
        frame = a.get("frame_name", "?")
        loop = a.get("loop_name") or frame
        where = f'loop "{loop}" (frame {frame}' + (f", created at {sources[frame]})" if frame in sources else ")")
        out[stack_key(Handle("stack", sn.id))] = stk.StackInfo(loop, where, bool(a.get("swap_memory", False)))
    return out


def _split_carry(c: Any) -> tuple[Any, dict[str, Any]]:
    vals, pred, state, iters = c
    rest, stacks = stk.split_state(state)
    return (vals, pred, rest, iters), stacks


def _join_carry(c_rest: Any, stacks: dict[str, Any]) -> Any:
    vals, pred, rest, iters = c_rest
    return vals, pred, {**rest, **stacks}, iters


#: the smallest capacity of a lower rung of the fused attempt's ladder, and the ratio between rungs
MIN_RUNG = 128
RUNG_RATIO = 8


def capacity_ladder(top: int) -> list[int]:
    """The stack capacities a fused attempt may run at, smallest first, ending with ``top`` (the
    backend's ``stack_chunk``): ``top / 8**k`` while that is at least ``MIN_RUNG``. The default chunk
    (1024) gives 128 and 1024; a chunk under 1024 gives itself alone."""
    caps = [top]
    while caps[0] % RUNG_RATIO == 0 and caps[0] // RUNG_RATIO >= MIN_RUNG:
        caps.insert(0, caps[0] // RUNG_RATIO)
    return caps


def committed(x: Any) -> Any:
    """``x`` committed to the device it lies on. Why: a compiled function's cache key includes whether
    each argument array is committed. The outputs of a compiled call are, and the next run passes them
    back (kept stack buffers, a Variable's device copy), so a fresh array must be committed too, or the
    second run of every plan compiled the whole program again (about 1 s for a small LSTM step)."""
    (device,) = x.devices()
    return jax.device_put(x, device)


def refuse_firing_budget(who: str, options: RunOptions) -> None:
    """Compiled code counts loop iterations, not node firings: a ``max_firings`` budget other than the
    default (a guard the user did not choose, left to ``max_iterations``) is refused, never ignored."""
    if options.max_firings is not None and options.max_firings != _DEFAULT_MAX_FIRINGS:
        raise UnsupportedError(
            f"{who}: RunOptions.max_firings={options.max_firings} cannot be honoured: compiled code counts loop "
            "iterations, not firings; bound loops with max_iterations (or run on backend='reference')")


def variable_signature(graph: Graph, variables: dict[str, np.ndarray]) -> tuple[Any, ...]:
    """(name, dtype, shape) of every Variable of the graph, as plan signatures take them: a Variable
    the session has not set yet counts with its initial value."""
    gv = graph.variables
    if not gv:
        return ()
    out = []
    for name in sorted(gv):
        v = variables.get(name)
        if v is None:  # as the run will set it: the initial value in the Variable's dtype (a float64
            # initial value of a float32 Variable must not make the first run's plan another one's)
            attrs = gv[name].attrs
            v = np.asarray(attrs.get("initial_value"), dtype=np.dtype(attrs["dtype"]) if "dtype" in attrs else None)
        v = np.asarray(v)
        out.append((name, v.dtype.str, v.shape))
    return tuple(out)


def stack_source_var(n: Node) -> Optional[str]:
    src = n.inputs[0].node
    while src.op in ("Enter", "Switch", "Identity", "Merge") and src.raw_inputs:
        src = src.inputs[0].node
    return src.attrs.get("var_name") if src.op == "VarHandle" else None


class FastBackend:
    """The JAX executor. Options: ``stack_chunk`` (gradient stack capacity, in elements per stack, of
    one device-resident chunk; default 1024), ``keep_stack_buffers`` (default True: a plan's
    gradient stack buffers stay on the device between runs, so steady-state runs allocate nothing;
    False frees them at the end of every run, trading an allocation per run for memory held
    between runs; ``release_buffers()`` frees what is held at any time) and ``fallback`` (default
    True: a program that cannot be compiled — ``UnsupportedError`` while raising or tracing it —
    runs on the reference interpreter instead, with a ``RuntimeWarning`` once per program; False
    raises the ``UnsupportedError``) and ``device_memory_limit`` (default None: no cap; else the
    bytes of gradient stacks a run may hold on the device — a loop whose stacks would need more raises
    ``ResourceExhaustedError`` naming it, see ``stacks.ChunkStore``) and ``precompile_staged``
    (default False: a plan with gradient stacks compiles its staged path only when a run needs it,
    the first time a loop outgrows its chunk, so a plan whose loops always fit compiles one program;
    True compiles both paths on the plan's first run, so that no later run compiles whatever its
    trip count, at about twice the first run's compile time) and ``stack_ladder`` (default True: the
    one-call fused attempt of a plan with gradient stacks runs at the smallest capacity of
    ``capacity_ladder(stack_chunk)`` that held the last run — 128 entries, then 1024, by default —
    so the stacks a run uses, and the backend keeps, are sized to the runs' loops, at the price of
    one compilation per rung climbed; False: always ``stack_chunk`` entries)."""

    def __init__(self, graph: Graph, stack_chunk: int = 1024, keep_stack_buffers: bool = True,
                 fallback: bool = True, device_memory_limit: Optional[int] = None, precompile_staged: bool = False,
                 stack_ladder: bool = True, **options: Any) -> None:
        if options:
            raise TypeError(f"FastBackend: unknown options {sorted(options)}")
        if not isinstance(stack_chunk, int) or stack_chunk < 1:
            raise ValueError(f"stack_chunk must be a positive int, got {stack_chunk!r}")
        if device_memory_limit is not None and (not isinstance(device_memory_limit, (int, np.integer))
                                                or isinstance(device_memory_limit, bool) or device_memory_limit < 1):
            raise ValueError(f"device_memory_limit must be a positive int (bytes) or None, got {device_memory_limit!r}")
        self.device_memory_limit = None if device_memory_limit is None else int(device_memory_limit)
        self._records: list[dict[str, Any]] = []
        for name, flag in (("keep_stack_buffers", keep_stack_buffers), ("fallback", fallback),
                           ("precompile_staged", precompile_staged), ("stack_ladder", stack_ladder)):
            if not isinstance(flag, bool):
                raise ValueError(f"{name} must be a bool, got {flag!r}")
        self.fallback = fallback
        self._fallback: dict[Any, str] = {}  # run signature -> why it cannot be compiled
        # run signature -> fed tensors whose values decide shapes: plans are specialised on them
        self._static_keys: dict[Any, frozenset[Key]] = {}
        self._static_now: dict[Key, np.ndarray] = {}  # their values in the run being planned
        self._reference: Any = None
        self.graph = graph
        self.stack_chunk = stack_chunk
        self.keep_stack_buffers = keep_stack_buffers
        self.precompile_staged = precompile_staged
        self.stack_ladder = stack_ladder
        self.compile_count = 0
        self._plans: dict[Any, Plan] = {}
        self._dev_vars: dict[str, tuple[Any, Any]] = {}
        self._direct: dict[Any, Direct] = {}
        # hot key -> (Direct, graph edits, feed permutation): see ``_hot_direct``
        self._hot: dict[Any, tuple[Direct, int, Optional[tuple[int, ...]]]] = {}
        self._stack_bufs: dict[int, dict[str, stk.StackValue]] = {}
        self._timeline: Optional[Timeline] = None  # the trace of the run in progress (trace=True)
        self._deep_nesting = 0  # > 0 once a plan nests deeper than DEEP_NESTING: runs use call_deep
        self._switches: Optional[tuple[int, int]] = None
        self._checked_version = -1  # the graph version whose validation the last run saw pass

    def held_bytes(self) -> int:
        """Device bytes this backend holds between runs: kept gradient stack buffers and the device
        copies of Variables."""
        stacks = sum(v.nbytes() for bufs in self._stack_bufs.values() for v in bufs.values())
        return stacks + sum(int(dev.nbytes) for _, dev in self._dev_vars.values())

    def memory_records(self) -> list[dict[str, Any]]:
        """Per loop and device, the gradient stack memory of the last run: ``loop``, ``device``,
        ``device_bytes`` and ``host_bytes`` (what the loop's stacks held on each when its forward
        loop ended), ``chunks_to_host`` / ``chunks_from_host`` (chunks copied out and back),
        ``peak_device_bytes``, and ``swap_memory``, ``stacks``, ``chunks_kept_on_device``.
        ``tn.memory_report(session)`` presents them."""
        return [dict(r) for r in self._records]

    def release_buffers(self) -> None:
        """Free the device buffers held between runs (see ``held_bytes``). Compiled plans are kept;
        the next run allocates its stacks afresh and copies Variables from the session again."""
        self._stack_bufs.clear()
        self._dev_vars.clear()

    def _validate(self, fetches: list[Tensor], feeds: dict[Tensor, Any]) -> None:
        """Reject ill-formed graphs before compiling, with the reference backend's ValidationError
        (``turnout.validate`` caches the graph part per graph version)."""
        try:
            from turnout.validate import validate
        except ImportError:  # pragma: no cover - validation is part of turnout
            return
        validate(self.graph, fetches, list(feeds))

    def run(self, fetches: list[Tensor], feeds: dict[Tensor, Any], variables: dict[str, np.ndarray],
            options: Any) -> Any:
        """One ``Session.run``. Programs whose regions nest deeper than ``deep.DEEP_NESTING`` run on
        a thread with a large stack (``deep.call_deep``): tracing them recurses once per level."""
        refuse_firing_budget("fast backend", options)
        if options.trace:
            return self._run_traced(fetches, feeds, variables, options)
        hot = self._hot_direct(fetches, feeds, variables)
        if hot is not None:  # a repeated run of a one-call plan (no deep stack needed to call it)
            return self._run_hot(hot[0], hot[1], fetches, feeds, variables, options)
        if self._deep_nesting and not on_deep_thread():
            return call_deep(self._run_any, fetches, feeds, variables, options, nesting=self._deep_nesting)
        try:
            return self._run_any(fetches, feeds, variables, options)
        except NeedsDeep as e:
            return call_deep(self._run_any, fetches, feeds, variables, options, nesting=e.nesting)

    def _run_traced(self, fetches: list[Tensor], feeds: dict[Tensor, Any], variables: dict[str, np.ndarray],
                    options: Any) -> Any:
        """A run that records its timeline (``fast.timeline``): the same run, with each compiled call
        waited for so that its span covers its device time."""
        tl = self._timeline = Timeline()
        untraced = RunOptions(options.scheduler, options.seed, False, options.max_firings, options.max_iterations)
        try:
            with tl.span("Session.run", "run") as args:
                before = self.compile_count
                result = self.run(fetches, feeds, variables, untraced)
                args["compiled"] = self.compile_count != before
        finally:
            self._timeline = None
        result.trace = tl
        return result

    def _span(self, name: str, row: str, **args: Any) -> AbstractContextManager[dict[str, Any]]:
        """A timeline span while tracing; otherwise nothing (one attribute read)."""
        tl = self._timeline
        return tl.span(name, row, **args) if tl is not None else _NO_SPAN

    # ---- the hot path: a repeated run of a Direct plan -------------------------------------------
    @staticmethod
    def _hot_key(fetches: list[Tensor], feeds: dict[Tensor, Any]) -> Any:
        """What a repeated run is recognised by: its fetches and its feeds' (tensor, dtype, shape), in
        the feed dict's order (the order ``_remember_hot`` recorded the feeds' permutation for)."""
        return (tuple([(t.node.id, t.index) for t in fetches]),
                tuple([(t.node.id, t.index, v.dtype, v.shape) for t, v in feeds.items()]))

    def _remember_hot(self, d: Direct, fetches: list[Tensor], feeds: dict[Tensor, Any]) -> None:
        """After a run on ``d``: the next run of the same fetches and feed signature goes straight to
        ``d`` (``_run_hot``) while the graph's edits and the plan's Variables are unchanged."""
        order = [(t.node.id, t.index) for t in feeds]
        perm: Optional[tuple[int, ...]] = tuple([order.index(k) for k in d.feed_keys])
        if perm == tuple(range(len(order))):
            perm = None
        self._hot[self._hot_key(fetches, feeds)] = (d, self.graph.edits, perm)

    def _hot_direct(self, fetches: list[Tensor], feeds: dict[Tensor, Any], variables: dict[str, np.ndarray]
                    ) -> Optional[tuple[Direct, Optional[tuple[int, ...]]]]:
        """The ``Direct`` plan of a repeated run, or None when the run must take the general path.

        Why: the general path's run signature (``_run_any``: sorted feed signature, every Variable's
        dtype and shape) costs tens of microseconds, as much as the compiled call of a small program.
        A repeated run needs less to be recognised: its fetches and feed signature, the graph's
        ``edits`` and version (no validation pending), and the plan's Variables still the host arrays
        the last run saw (``_dev_vars``: a Variable the user replaced may have another shape)."""
        if self.graph.version != self._checked_version or self._timeline is not None:
            return None
        got = self._hot.get(self._hot_key(fetches, feeds))
        if got is None or got[1] != self.graph.edits:
            return None
        d = got[0]
        dev_vars = self._dev_vars
        for name in d.var_names:
            rec = dev_vars.get(name)
            if rec is None or rec[0] is not variables.get(name):
                return None
        return d, got[2]

    def _run_hot(self, d: Direct, perm: Optional[tuple[int, ...]], fetches: list[Tensor], feeds: dict[Tensor, Any],
                 variables: dict[str, np.ndarray], options: Any) -> RunResult:
        """``_run_direct`` for a run ``_hot_direct`` recognised: the feeds by position, the Variables'
        device copies as the last run left them."""
        t0 = time.perf_counter()
        if perm is None:  # the feed dict's order is the plan's
            feed_vals = tuple(feeds.values())
        else:
            given = list(feeds.values())
            feed_vals = tuple([given[i] for i in perm])
        dev_vars = self._dev_vars
        var_vals = tuple([dev_vars[name][1] for name in d.var_names]) if d.var_names else ()
        with jax.enable_x64(True):
            if d.bounded:
                mi = options.max_iterations
                vals, flags, var_out = d.fn(feed_vals, var_vals, _INT32_MAX_NP if mi is None or mi >= _INT32_MAX
                                            else np.int32(mi))
            else:
                vals, flags, var_out = d.fn(feed_vals, var_vals)
            if flags is None and not d.var_names:  # nothing to check, nothing to write back
                self._records = []
                stats = dict(d.stats)
                stats["compiles"] = self.compile_count
                stats["stage_seconds"] = [time.perf_counter() - t0]
                return RunResult([np.asarray(v) for v in vals], None, None, stats)
            return self._direct_result(d, fetches, vals, flags, var_out, variables, t0)

    def _run_any(self, fetches: list[Tensor], feeds: dict[Tensor, Any], variables: dict[str, np.ndarray],
                 options: Any) -> Any:
        if self.graph.version != self._checked_version:
            # nodes were appended: the plans stay valid (they are keyed on ``edits``), but the graph as a
            # whole must still pass validation, as it must on every backend (a node appended since can
            # make it ill-formed)
            self._validate(fetches, feeds)
            self._checked_version = self.graph.version
        # ``edits``, not ``version``: nodes appended since (an op fetch's proxy) leave the plan valid
        dsig = (self.graph.edits, tuple([(t.node.id, t.index) for t in fetches]),
                tuple(sorted([(t.node.id, t.index, v.dtype.str, v.shape) for t, v in feeds.items()])),
                variable_signature(self.graph, variables))
        if self._fallback and dsig in self._fallback:
            return self._run_reference(dsig, fetches, feeds, variables, options)
        try:
            d = self._direct.get(dsig) if dsig not in self._static_keys else None
            if d is not None:  # the common repeated run: straight to its one compiled call
                result = self._try_direct(dsig, d, fetches, feeds, variables, options)
                if result is not None:
                    self._remember_hot(d, fetches, feeds)
                    return result
            while True:  # specialise on the fed values that decide shapes (lowering.NeedsStatic)
                static = self._static_keys.get(dsig, frozenset())
                by_key = {key(t): v for t, v in feeds.items()}
                self._static_now = {k: np.asarray(by_key[k]) for k in sorted(static)}
                vsig = dsig + (tuple((k, v.tobytes()) for k, v in self._static_now.items()),) if static else dsig
                try:
                    result = self._run_compiled(vsig, fetches, feeds, variables, options)
                    result.stats["executor"] = "compiled"
                    d = self._direct.get(vsig)
                    if d is not None and not static:  # it ran on the Direct path
                        self._remember_hot(d, fetches, feeds)
                    if static:
                        result.stats["specialized_on"] = sorted(self.graph.nodes[k[0]].outputs[k[1]].name
                                                                for k in static)
                    return result
                except NeedsStatic as e:
                    if e.keys <= static or not e.keys <= set(by_key):
                        raise UnsupportedError(str(e)) from None
                    self._static_keys[dsig] = static | e.keys
        except UnsupportedError as e:
            if not self.fallback:
                raise
            self._fallback[dsig] = str(e)
            warnings.warn(f"{e}; this program runs on the reference interpreter instead (at interpreter speed)",
                          RuntimeWarning, stacklevel=4)
            return self._run_reference(dsig, fetches, feeds, variables, options)

    def _run_reference(self, dsig: Any, fetches: list[Tensor], feeds: dict[Tensor, Any],
                       variables: dict[str, np.ndarray], options: Any) -> Any:
        """Run a program the fast backend cannot compile on the reference interpreter: the same
        values, Variables and errors, at interpreter speed. ``stats['executor']`` says so."""
        if self._reference is None:
            from turnout.reference.executor import ReferenceBackend

            self._reference = ReferenceBackend(self.graph)
        result = self._reference.run(fetches, feeds, variables, options)
        self._records = []  # the interpreter's stacks are Python objects, on no device
        result.stats.update({"backend": "fast", "executor": "reference interpreter (fallback)",
                             "fallback_reason": self._fallback[dsig]})
        return result

    def _run_compiled(self, dsig: Any, fetches: list[Tensor], feeds: dict[Tensor, Any],
                      variables: dict[str, np.ndarray], options: Any) -> Any:
        d = self._direct.get(dsig)
        if d is None:
            self._validate(fetches, feeds)
            with jax.enable_x64(True):
                plan = self._plan(fetches, feeds, variables, self.stack_chunk)
            if plan.direct_ok:
                d = self._direct[dsig] = self._make_direct(plan, fetches, feeds)
        if d is not None:
            result = self._try_direct(dsig, d, fetches, feeds, variables, options)
            if result is not None:
                return result
        self._validate(fetches, feeds)
        cap = self.stack_chunk
        retries = 0
        with jax.enable_x64(True):
            while True:
                try:
                    values, stats = self._run(fetches, feeds, variables, options, cap)
                    break
                except _Retry:
                    if cap * 2 > _MAX_CAPACITY:
                        raise KernelError(f"fast backend: a gradient stack needs more than {_MAX_CAPACITY} "
                                          "entries per chunk") from None
                    cap *= 2
                    retries += 1
        stats["stack_capacity_retries"] = retries
        return RunResult(values=values, stats=stats)

    def _try_direct(self, dsig: Any, d: Direct, fetches: list[Tensor], feeds: dict[Tensor, Any],
                    variables: dict[str, np.ndarray], options: Any) -> Any:
        """A run on the ``Direct`` path, or None when its trace finds that the plan does not fit it
        (a dead or non-tensor fetch): the plan then runs on the general path from now on."""
        try:
            with jax.enable_x64(True):
                return self._run_direct(d, fetches, feeds, variables, options)
        except _NotDirect:
            d.plan.no_direct = True
            del self._direct[dsig]
            self._hot = {k: v for k, v in self._hot.items() if v[0] is not d}
            return None

    def _make_direct(self, plan: Plan, fetches: list[Tensor], feeds: dict[Tensor, Any]) -> Direct:
        feed_keys = tuple(sorted(key(t) for t in feeds))
        var_names = tuple(plan.var_nodes)
        fn = plan.direct_fn(feed_keys, tuple(key(t) for t in fetches), var_names)
        written = tuple(n in plan.written_vars for n in var_names)
        stats = {
            "backend": "fast", "stages": 1, "fused": False,
            "stack_capacity": plan.capacity, "stack_chunks_kept": 0, "stack_chunks_from_host": 0,
            "peak_device_stack_bytes": 0, "stack_chunks_swapped": 0, "peak_host_stack_bytes": 0,
            "stack_capacity_retries": 0, "executor": "compiled",
        }
        return Direct(plan, fn, feed_keys, var_names, written, plan.has_loops, stats)

    def _run_direct(self, d: Direct, fetches: list[Tensor], feeds: dict[Tensor, Any],
                    variables: dict[str, np.ndarray], options: Any) -> Any:
        """One run on the ``Direct`` path; the same checks, errors and variable updates as ``_run``."""
        t0 = time.perf_counter()
        by_key = {(t.node.id, t.index): v for t, v in feeds.items()}
        feed_vals = tuple([by_key[k] for k in d.feed_keys])
        var_vals = tuple([self._device_var(d.plan, name, variables) for name in d.var_names])
        if self._timeline is None:
            vals, flags, var_out = self._call_direct(d, feed_vals, var_vals, options)
        else:
            with self._span("one compiled call", "compiled stages") as args:
                before = self.compile_count
                vals, flags, var_out = self._call_direct(d, feed_vals, var_vals, options)
                flags = flags if flags is None else np.asarray(flags)
                args["compiled"] = self.compile_count != before
        return self._direct_result(d, fetches, vals, flags, var_out, variables, t0)

    @staticmethod
    def _call_direct(d: Direct, feed_vals: tuple[Any, ...], var_vals: tuple[Any, ...], options: Any) -> Any:
        if not d.bounded:
            return d.fn(feed_vals, var_vals)
        mi = options.max_iterations
        mi = _INT32_MAX_NP if mi is None or mi >= _INT32_MAX else np.int32(mi)
        return d.fn(feed_vals, var_vals, mi)

    def _direct_result(self, d: Direct, fetches: list[Tensor], vals: Any, flags: Any, var_out: Any,
                       variables: dict[str, np.ndarray], t0: float) -> RunResult:
        """The fetched values on the host, errors raised, Variables written back: the end of a
        ``Direct`` run."""
        if flags is None:  # no check could fail and every fetch is live (see ``Plan.direct_fn``)
            values = [np.asarray(v) for v in vals]
        else:
            flags = np.asarray(flags)
            code = int(flags[0])
            if code:
                self._raise_errors(d.plan, {"err": code}, 0)
            values = []
            for t, v, live in zip(fetches, vals, flags[1:].tolist(), strict=True):
                if not live:
                    raise DeadFetchError(
                        f"fetch {t.name} is dead: it lies on a branch of a conditional that did not run "
                        f"(op {t.node.op} \"{t.node.name}\")")
                values.append(np.asarray(v))
        for name, dev, w in zip(d.var_names, var_out, d.written, strict=True):
            if w:
                variables[name] = np.asarray(dev)
            self._dev_vars[name] = (variables[name], dev)
        self._records = []
        stats = dict(d.stats)
        stats["compiles"] = self.compile_count
        stats["stage_seconds"] = [time.perf_counter() - t0]
        return RunResult(values=values, stats=stats)

    def _plan(self, fetches: list[Tensor], feeds: dict[Tensor, Any], variables: dict[str, np.ndarray],
              cap: int) -> Plan:
        sig = (
            id(self.graph), self.graph.edits, tuple(key(t) for t in fetches),
            tuple(sorted((key(t), np.asarray(v).dtype.str, np.shape(v)) for t, v in feeds.items())),
            variable_signature(self.graph, variables), cap,
            tuple((k, v.tobytes()) for k, v in self._static_now.items()),
        )
        plan = self._plans.get(sig)
        if plan is None:
            deep = on_deep_thread()
            if not deep and self._switch_count() > DEEP_NESTING:
                raise NeedsDeep(self._switch_count())  # raising may recurse once per nested cond
            program = functionalize(self.graph, fetches, feeds)
            plan = self._plans[sig] = Plan(self, program, {t.node.id for t in feeds}, cap)
            plan.static_feeds = dict(self._static_now)
            if plan.nesting > DEEP_NESTING:
                self._deep_nesting = max(self._deep_nesting, plan.nesting)
                if not deep:
                    raise NeedsDeep(plan.nesting)
        return plan

    def _switch_count(self) -> int:
        """Switch nodes and loop frames of the graph: a bound on how deep its regions can nest."""
        got = self._switches
        if got is None or got[0] != self.graph.version:
            n = sum(1 for nd in self.graph.nodes if nd.op in ("Switch", "LoopCond"))
            got = self._switches = (self.graph.version, n)
        return got[1]

    def _device_var(self, plan: Plan, name: str, variables: dict[str, np.ndarray]) -> Any:
        """The device copy of Variable ``name`` a run starts from: the one the last run handed back while
        the session's host value is still the one it wrote, else the host value (its initial value the
        first time) put on the device, committed as a run's outputs are, or the next run compiles again."""
        if name not in variables:
            vn = plan.var_nodes[name]
            variables[name] = np.array(vn.attrs["initial_value"], dtype=np.dtype(vn.attrs["dtype"]))
        host = variables[name]
        cached = self._dev_vars.get(name)
        return cached[1] if cached is not None and cached[0] is host else committed(jnp.asarray(host))

    def _initial_state(self, plan: Plan, variables: dict[str, np.ndarray]) -> dict[str, Any]:
        # numpy scalars, not jnp: a jnp scalar is an eager dispatch (tens of microseconds) per value,
        # and the compiled stages take numpy leaves as the same int32 / bool arguments
        state: dict[str, Any] = {"err": np.int32(0)}
        for name in plan.var_nodes:
            state[var_key(name)] = self._device_var(plan, name, variables)
        reuse = self._stack_bufs.pop(id(plan), {})
        for sn in plan.stack_nodes:
            k = stack_key(Handle("stack", sn.id))
            dtype = _stack_dtype(sn)
            shapes = plan.prealloc.get(sn.id)
            if shapes is None:
                state[k] = stk.StackValue(plan.capacity, dtype)
                continue
            old = reuse.get(k)
            if old is not None and not old.pending:
                # the last run's buffers, donated to this run: no allocation; entries above the
                # pointer are never read ([E-Stack-Pop] reads only what this run pushed)
                state[k] = stk.StackValue(plan.capacity, dtype, old.buf, old.idx, np.int32(0))
            else:
                fresh = stk.StackValue(plan.capacity, dtype).materialize(*shapes)
                state[k] = stk.StackValue(plan.capacity, dtype, committed(fresh.buf), committed(fresh.idx),
                                          np.int32(0))
        return state

    def _run(self, fetches: list[Tensor], feeds: dict[Tensor, Any], variables: dict[str, np.ndarray],
             options: Any, cap: int) -> tuple[list[Any], dict[str, Any]]:
        plan = self._plan(fetches, feeds, variables, cap)
        mi = options.max_iterations if options.max_iterations is not None else _INT32_MAX
        max_iter = np.int32(min(int(mi), _INT32_MAX))
        if plan.fused is not None and not plan.predict_overflow:
            got = self._run_fused_sized(plan, fetches, feeds, variables, max_iter)
            if got is not None:
                return got
        state = self._initial_state(plan, variables)
        # device_put, not jnp.asarray: on CPU it aliases a 64-byte-aligned host array (such as the
        # host view of a jax array) instead of copying it; the run reads it only until it returns
        env: dict[Key, Any] = {key(t): jax.device_put(v) for t, v in feeds.items()}
        lives: dict[Key, Any] = {}
        store = stk.ChunkStore(plan.stack_info, self.device_memory_limit)
        store.observe(state)
        stage_s: list[float] = []
        for st in plan.stages:
            t0 = time.perf_counter()
            env_in = {k: wrap_static(env[k]) for k in st.reads if k in env}
            if st.driven is None:
                if "seg" not in st.fns:
                    st.fns["seg"] = plan.segment_fn(st)
                rest, stacks = stk.split_state(state)
                with self._span(f"stage {len(stage_s)}: compiled segment", "compiled stages") as args, \
                        _device_oom(plan, st):
                    before = self.compile_count
                    out, lv, state = st.fns["seg"](env_in, rest, stacks, max_iter)
                    args["compiled"] = self.compile_count != before
                    args["error_word"] = int(state["err"])
                lives.update(lv)
            else:
                with self._span(f"stage {len(stage_s)}: driven {st.driven.describe()}", "compiled stages") as args:
                    before = self.compile_count
                    out, state = self._drive(plan, st, env_in, state, max_iter, int(max_iter), store)
                    args["compiled"] = self.compile_count != before
            store.observe(state)
            self._raise_errors(plan, state, store.moved())
            env.update(out)
            stage_s.append(time.perf_counter() - t0)
        plan.predict_overflow = store.moved() > 0
        values = self._finish(plan, fetches, env, lives, state, variables)
        self._records = store.records()
        stats = {
            "backend": "fast", "compiles": self.compile_count, "stages": len(plan.stages), "fused": False,
            "stack_capacity": cap, "stage_seconds": stage_s, **store.stats(),
        }
        return values, stats

    def _run_fused_sized(self, plan: Plan, fetches: list[Tensor], feeds: dict[Tensor, Any],
                         variables: dict[str, np.ndarray], max_iter: Any) -> Optional[tuple[list[Any], dict[str, Any]]]:
        """The fused attempt with stack buffers sized to what the runs use: ``plan``'s own capacity
        (``stack_chunk``) is the last of a ladder of capacities (``capacity_ladder``), each a plan of
        its own, compiled by the first run that needs it. A run starts at the rung that held the last
        run and climbs when a stack overflows; only an overflow of the top rung goes to the staged
        path. ``None``: the staged path must run.

        Why: a fused program's stacks have the capacity it was compiled for, and the backend keeps
        them between runs. At ``stack_chunk`` (1024) every run of the benchmark LSTM held 640 MiB of
        stacks (a peak of 1.0 GiB at T = 100, against 450 MiB for JAX); on the lower rung (128) a run
        of 100 iterations holds an eighth of that. The price is one compilation per rung climbed, at
        most once per rung in a plan's life: a trip count in a rung already compiled never compiles.
        """
        ladder = plan.rungs if plan.rungs is not None else self._ladder(plan, fetches, feeds, variables)
        start = ladder.index(plan.rung) if plan.rung in ladder else 0
        for p in ladder[start:]:
            if p.fused is None:
                continue
            got = self._run_fused(p, fetches, feeds, variables, max_iter)
            if got is not None:
                plan.rung = p
                for other in ladder:  # only the rung that ran keeps its buffers
                    if other is not p:
                        self._stack_bufs.pop(id(other), None)
                return got
            if p is not plan:
                self._stack_bufs.pop(id(p), None)
        return None

    def _ladder(self, plan: Plan, fetches: list[Tensor], feeds: dict[Tensor, Any],
                variables: dict[str, np.ndarray]) -> list[Plan]:
        """``plan`` and its lower rungs (plans of the same program at ``capacity_ladder`` capacities),
        smallest first. With ``stack_ladder=False`` there is one rung; with ``precompile_staged`` too:
        that option promises that no run after the first compiles, which climbing would break; a plan
        retried at twice the chunk (a nested loop's stack outgrew it on the staged path) has one too."""
        lower = capacity_ladder(plan.capacity)
        # a plan of another capacity than stack_chunk (a nested stack's retry) has no ladder either
        one = self.precompile_staged or not self.stack_ladder or plan.capacity != self.stack_chunk
        caps = [plan.capacity] if one else lower
        plan.rungs = [plan if c == plan.capacity else self._plan(fetches, feeds, variables, c) for c in caps]
        return plan.rungs

    def _run_fused(self, plan: Plan, fetches: list[Tensor], feeds: dict[Tensor, Any],
                   variables: dict[str, np.ndarray], max_iter: Any) -> Optional[tuple[list[Any], dict[str, Any]]]:
        """Run ``plan.fused`` (one jitted call); ``None``: the staged path must run instead.

        It must when a stack overflowed its chunk (or underflowed: the staged path decides whether
        that is an error). The staged functions are compiled only then, by the first run that needs
        them: a plan whose loops always fit their chunk never compiles them (with ``precompile_staged``
        the plan's first run runs the staged path too, to compile it up front). Nothing of a discarded
        attempt is applied:
        Variables are written back by ``_finish`` only, and errors are raised only for a kept
        attempt. The stack buffers are kept either way (the staged path reuses them).
        """
        st = plan.fused
        assert st is not None
        first = not plan.fused_warm
        t0 = time.perf_counter()
        state = self._initial_state(plan, variables)
        store = stk.ChunkStore(plan.stack_info, self.device_memory_limit)
        store.observe(state)
        # the fed numpy arrays go to the one call as they are (the call transfers them, as a jitted
        # JAX function does): a ``device_put`` of each first costs a dispatch per feed and per run
        env: dict[Key, Any] = {key(t): v for t, v in feeds.items()}
        try:
            if "seg" not in st.fns:
                st.fns["seg"] = plan.segment_fn(st, fused=True)
            env_in = {k: env[k] for k in st.reads if k in env}
            rest, stacks = stk.split_state(state)
            with self._span("fused attempt (whole program, one call)", "compiled stages") as args, \
                    _device_oom(plan, st):
                before = self.compile_count
                out, lives, state = st.fns["seg"](env_in, rest, stacks, max_iter)
                args["compiled"] = self.compile_count != before
                args["error_word"] = int(state["err"])
        except UnsupportedError:
            plan.fused = None  # something only the staged path can lower: use it from now on
            return None
        plan.fused_warm = True
        if plan.prealloc:
            self._stack_bufs[id(plan)] = {k: v for k, v in state.items()
                                          if isinstance(v, stk.StackValue) and not v.pending}
        code = int(state["err"])
        if (first and self.precompile_staged) or (code and plan.codes.lookup(code)[0] in ("overflow", "underflow")):
            return None
        self._raise_errors(plan, state, 0)
        store.observe(state)
        env.update(out)
        values = self._finish(plan, fetches, env, lives, state, variables)
        store.saved(store.ledgers)
        self._records = store.records()
        stats = {
            "backend": "fast", "compiles": self.compile_count, "stages": 1, "fused": True,
            "stack_capacity": plan.capacity, "stage_seconds": [time.perf_counter() - t0], **store.stats(),
        }
        return values, stats

    def _finish(self, plan: Plan, fetches: list[Tensor], env: dict[Key, Any], lives: dict[Key, Any],
                state: dict[str, Any], variables: dict[str, np.ndarray]) -> list[Any]:
        """The fetched values on the host, and the Variables written back: the last step of a run."""
        values = []
        for t in fetches:
            v = env[key(t)]
            live = lives.get(key(t), True)
            if v is DEAD or not bool(live):
                raise DeadFetchError(
                    f"fetch {t.name} is dead: it lies on a branch of a conditional that did not run "
                    f"(op {t.node.op} \"{t.node.name}\")")
            values.append(to_host(v))
        if plan.prealloc and self.keep_stack_buffers:
            self._stack_bufs[id(plan)] = {k: v for k, v in state.items()
                                          if isinstance(v, stk.StackValue) and not v.pending}
        else:
            self._stack_bufs.pop(id(plan), None)
        for name in plan.var_nodes:
            dev = state[var_key(name)]
            if name in plan.written_vars:
                variables[name] = np.asarray(dev)
            self._dev_vars[name] = (variables[name], dev)
        return values

    def _drive(self, plan: Plan, st: Stage, env_in: dict[Key, Any], state: dict[str, Any], max_iter: Any,
               max_iter_py: int, store: stk.ChunkStore) -> tuple[dict[Key, Any], dict[str, Any]]:
        """Run a top-level loop chunk by chunk. Between chunks, a stack that outgrew its buffer hands
        the full chunk to ``store`` (to host memory, or kept on the device: the loop's
        ``swap_memory``), and a stack that runs low takes the chunk that ``store`` brought back."""
        if not st.fns:
            st.fns["init"], st.fns["chunk"], st.fns["finish"] = plan.loop_fns(st)
        store.begin_pops({s: state[s] for s in st.pop_stacks if s in state})
        rest, stacks = stk.split_state(state)
        with _device_oom(plan, st):
            c, state = st.fns["init"](env_in, rest, stacks, max_iter)
        if c is not None:
            # committed to the stacks' device like the chunk outputs that replace them (``stk.scalar_on``)
            like = next((v.buf for v in c[2].values() if isinstance(v, stk.StackValue) and not v.pending), None)
            aux = ({s: stk.scalar_on(like, 0) for s in st.push_stacks},
                   {s: stk.scalar_on(like, 0) for s in st.pop_stacks})
            while True:
                host_has = {s: np.bool_(store.has(s)) for s in st.pop_stacks}
                before = int(c[3])
                c_rest, c_stacks = _split_carry(c)
                with self._span("chunk", "driven loops") as args, _device_oom(plan, st):
                    c, aux = st.fns["chunk"](env_in, c_rest, c_stacks, aux, max_iter, host_has)
                    args["iterations"] = int(c[3]) - before
                vals, pred, state, iters = c
                store.observe(state)
                if int(state["err"]) != 0 or not bool(pred) or int(iters) >= max_iter_py:
                    break
                grow, shrink = aux
                full = {}
                for s, n in st.push_stacks.items():
                    sv = state[s]
                    if not sv.pending and int(sv.ptr) + max(n, int(grow[s])) > plan.capacity and int(sv.ptr) > 0:
                        full[s] = sv
                low = {}
                for s, n in st.pop_stacks.items():
                    sv = state[s]
                    if not sv.pending and int(sv.ptr) < max(n, int(shrink[s])) and store.has(s):
                        low[s] = sv
                if full:
                    with self._span("stack chunks full", "host swaps", stacks=sorted(full)), _device_oom(plan, st):
                        state.update(store.spill(full))
                if low:
                    with self._span("stack chunks back", "host swaps", stacks=sorted(low)), _device_oom(plan, st):
                        state.update(store.refill(low))
                acted = bool(full or low)
                if not acted and int(iters) == before:
                    raise _Retry()
                c = (vals, pred, state, iters)
        with _device_oom(plan, st):
            if c is None:
                rest, stacks = stk.split_state(state)
                out, state = st.fns["finish"](env_in, None, stacks, rest, max_iter)
            else:
                c_rest, c_stacks = _split_carry(c)
                out, state = st.fns["finish"](env_in, c_rest, c_stacks, {}, max_iter)
        store.end_pushes(st.push_stacks)
        return out, state

    def _raise_errors(self, plan: Plan, state: dict[str, Any], swapped: int) -> None:
        code = int(state["err"])
        if not code:
            return
        kind, message = plan.codes.lookup(code)
        # A nested loop's stack outgrew its chunk (overflow), or was swapped out at a point its
        # backward loop could not refill (underflow after swaps): retry with a larger capacity.
        if kind == "overflow" or (kind == "underflow" and swapped):
            raise _Retry()
        if kind == "nonterm":
            raise NonTerminationError(message)
        raise KernelError(message)


def _stack_dtype(sn: Node) -> Any:
    for k in ("elem_dtype", "dtype"):
        if sn.attrs.get(k):
            try:
                return np.dtype(sn.attrs[k])
            except TypeError:
                pass
    return np.float32


@contextmanager
def _device_oom(plan: Plan, st: Stage) -> Iterator[None]:
    """XLA's own out-of-memory (``RESOURCE_EXHAUSTED``, from a GPU or TPU allocator) as Turnout's
    ``ResourceExhaustedError``, naming the loop whose stage ran and suggesting ``swap_memory=True``."""
    try:
        yield
    except jax.errors.JaxRuntimeError as e:
        if "RESOURCE_EXHAUSTED" not in str(e):
            raise
        keys = [*st.push_stacks, *st.pop_stacks]
        loops = sorted({plan.stack_info[k].where for k in keys if k in plan.stack_info})
        what = ", ".join(loops) if loops else (st.driven.describe() if st.driven is not None else "a compiled stage")
        raise ResourceExhaustedError(
            f"fast backend: the device ran out of memory running {what}: {str(e).splitlines()[0]}; run loops "
            "with swap_memory=True to move full gradient stack chunks to host memory, or lower stack_chunk") from None
