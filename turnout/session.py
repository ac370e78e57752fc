"""``Session``: run a graph on a backend, with feeds, nested fetches and persistent Variables.

Why a thin layer: every backend (reference, fast, partitioned) takes the same flat request — fetch
tensors, fed values, the variable store, run options — so feed checking, fetch structures and
Variable persistence are written once here, and the backends agree on errors by construction.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from dataclasses import dataclass, field, replace
from typing import Any, Optional, Protocol

import numpy as np

from turnout import dtypes as dt
from turnout import nest
from turnout import shapes as sh
from turnout.arguments import option_fields, positive_int
from turnout.errors import ArgumentError, ExecutionError, FeedError, GraphBuildError
from turnout.graph import Graph, Node, Tensor, fetched_tensor, get_default_graph
from turnout.limits import DEFAULT_MAX_TENSOR_BYTES, allocation_limit, current_limit
from turnout.run_schedule import INTERPRETER_STEP, RunSchedule, Step
from turnout.store import VariableStore

#: backend name -> "module:Class". Backends load lazily (the fast one imports jax).
BACKENDS: dict[str, str] = {
    "reference": "turnout.reference.executor:ReferenceBackend",
    "fast": "turnout.fast.backend:FastBackend",
    "smallstep": "turnout.semantics.smallstep:SmallStepBackend",
    "partitioned": "turnout.devices.executor:PartitionedBackend",
    "fast-partitioned": "turnout.devices.fast_executor:FastPartitionedBackend",
    "ray": "turnout.devices.ray_runtime:RayBackend",
}


@dataclass
class RunOptions:
    """Per-run options (``docs/limits.rst`` lists them with their defaults and who enforces them).

    ``scheduler``: "fifo", "lifo" or "random" (with ``seed``) — the order in which the reference
    interpreter fires ready nodes; results never depend on it. ``trace`` records every firing.
    Non-termination guards: ``max_iterations`` bounds each loop instance (every backend),
    ``max_firings`` the firings of one run and ``max_seconds`` its wall-clock time (the interpreting
    backends: reference and small-step). The defaults stop a runaway loop on the reference backend
    within about ``max_seconds``; each error names the loop and the option that raises the limit.
    ``max_tensor_bytes`` is the allocation guard: no tensor a run creates may be larger (checked
    before allocating, on every backend). None turns a guard off.
    ``memory_budget``: the bytes that the values the run's loops save for their gradients (gradient
    stacks) may hold on the device at once, all loops together (None: no budget; a loop's own
    ``tn.while_loop(..., memory_budget=)`` bounds that loop's share). ``turnout.memory_plan`` decides
    per loop how it is honoured; a run that outgrows a gradient's stacks is repeated on the
    ``tn.gradients`` call rebuilt to recompute under it (``turnout.rebuild``), and one that cannot
    stay within it raises ``ResourceExhaustedError`` (the reference and fast backends, on one device
    or per device when partitioned or on a cluster's tasks, and the small-step system; a backend
    that cannot count it refuses the option).
    ``docs/memory_budgets.rst``.
    """

    scheduler: str = "fifo"
    seed: int = 0
    trace: bool = False
    max_firings: Optional[int] = 2_000_000
    max_iterations: Optional[int] = 1_000_000
    max_seconds: Optional[float] = 10.0
    max_tensor_bytes: Optional[int] = DEFAULT_MAX_TENSOR_BYTES
    memory_budget: Optional[int] = None

    def __new__(cls, *args: Any, **fields: Any) -> RunOptions:
        # a misspelt option (or one too many) is refused by name, not by the dataclass's TypeError
        option_fields(cls, args, fields, "run option")
        return super().__new__(cls)

    def __post_init__(self) -> None:
        # Checked here, once, so every backend rejects the same bad options the same way.
        if not isinstance(self.scheduler, str) or self.scheduler not in ("fifo", "lifo", "random"):
            raise ArgumentError(f"unknown scheduler {self.scheduler!r}; choose fifo, lifo or random")
        for name in ("max_firings", "max_iterations", "max_tensor_bytes", "memory_budget"):
            v = getattr(self, name)
            if v is not None and not positive_int(v):
                raise ArgumentError(f"RunOptions.{name} must be a positive int or None, got {v!r}")
        v = self.max_seconds
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0):
            raise ArgumentError(f"RunOptions.max_seconds must be a positive number or None, got {v!r}")
        if not isinstance(self.seed, (int, np.integer)) or isinstance(self.seed, bool):
            raise ArgumentError(f"RunOptions.seed must be an int, got {self.seed!r}")
        if not isinstance(self.trace, (bool, np.bool_)):
            raise ArgumentError(f"RunOptions.trace must be a bool, got {self.trace!r}")


def _run_option_fields(fields: Mapping[Any, Any]) -> dict[str, Any]:
    """``fields`` checked to name fields of ``RunOptions`` (a misspelt option is refused by name, not
    left to the dataclass's ``TypeError``)."""
    option_fields(RunOptions, (), fields, "run option")
    return dict(fields)


@dataclass
class RunResult:
    """What a backend returns: fetched values, and optionally a trace and firing counts."""

    values: list[Any]
    trace: Optional[Any] = None
    counts: Optional[dict[tuple[str, tuple[Any, ...]], int]] = None
    stats: dict[str, Any] = field(default_factory=dict)


class Backend(Protocol):
    """What ``Session`` needs of a backend: made from the graph and its options, it runs one step at a time."""

    def __init__(self, graph: Graph, **options: Any) -> None: ...

    def run(self, fetches: list[Tensor], feeds: dict[Tensor, Any], variables: dict[str, np.ndarray],
            options: RunOptions) -> RunResult:
        """Run one step: the values of ``fetches`` given ``feeds``; ``variables`` holds the session's Variable values
        by name, and the step's assigns update it."""
        ...


def load_backend(name: str) -> type:
    """The backend class registered as ``name`` in ``BACKENDS`` (imported on first use)."""
    if not isinstance(name, str):
        raise ArgumentError(f"Session's backend must be a string, one of {sorted(BACKENDS)}; got {name!r}")
    try:
        spec = BACKENDS[name]
    except KeyError:
        raise ArgumentError(f"unknown backend {name!r}; choose one of {sorted(BACKENDS)}") from None
    mod, cls = spec.split(":")
    return getattr(importlib.import_module(mod), cls)  # type: ignore[no-any-return]


def check_feed(t: Tensor, value: Any) -> np.ndarray:
    """A fed value, converted to the tensor's dtype, with its kind, range and shape checked.

    The value must hold the same number after conversion (``dtypes.as_checked_array``): ``2**40``
    fed into an int32 placeholder, the largest uint64 fed into an int64 one, a string (even
    ``"1.5"``), a complex number or a datetime are FeedErrors naming the tensor, never wrapped or
    parsed."""
    if t.dtype.is_opaque:
        raise FeedError(f"cannot feed {t.name}: it is a {t.dtype.name} tensor")
    if t.dtype.is_integer and getattr(value, "dtype", np.asarray(value).dtype if isinstance(value, float) else None) \
            is not None and np.asarray(value).dtype.kind == "f":
        raise FeedError(f"feeding {t.name} ({t.dtype.name}) with a floating value; cast it first")
    try:
        arr = dt.as_checked_array(value, t.dtype, f"feeding {t.name} ({t.dtype.name})")
    except ValueError as e:
        raise FeedError(str(e)) from None
    if not sh.compatible(t.shape, arr.shape):
        raise FeedError(f"feeding {t.name}: value of shape {list(arr.shape)} for a tensor of shape {sh.fmt(t.shape)}")
    return arr


_F32_MAX = float(np.finfo(np.float32).max)
_INT_RANGE = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}


def _scalar_fits(d: dt.DType, value: Any) -> bool:
    """The per-value check of ``check_feed`` for a Python scalar whose kind already passed, without
    numpy: a Python int in the integer range, or any int or float into a float tensor that stays
    finite (the common feeds of small programs run many times)."""
    tv = type(value)
    if tv is int and d.is_integer:
        lo, hi = _INT_RANGE[d.name]
        return lo <= value <= hi  # type: ignore[no-any-return]
    if (tv is float or tv is int) and d.is_floating:
        return d.name == "float64" or not math.isfinite(value) or abs(value) <= _F32_MAX
    return False


def _range_checked(d: dt.DType, src: np.dtype) -> bool:
    """Whether a feed of numpy dtype ``src`` into a ``d`` tensor needs a per-value check (narrowing):
    its kind and shape checks depend only on (tensor, dtype, shape), but whether the *values* fit does
    not, so those feeds are never served from the signature cache."""
    return src.itemsize > d.itemsize or (d.is_integer and src.kind in "fu") or src.kind == "O"


class Session:
    """``tn.Session(graph, backend="reference")``; ``sess.run(fetches, feed_dict)``.

    Variables live in the session and persist across runs. ``last_result`` holds the trace / firing
    counts of the last run when requested.
    """

    def __init__(self, graph: Optional[Graph] = None, backend: str = "reference", **backend_options: Any) -> None:
        if graph is not None and not isinstance(graph, Graph):
            raise ArgumentError(f"Session's graph must be a tn.Graph, not {type(graph).__name__}")
        self.graph = graph if graph is not None else get_default_graph()
        if not isinstance(backend, str) or backend not in BACKENDS:
            load_backend(backend)  # refuses it, naming the choices
        self.backend_name = backend
        if backend_options.get("cluster") is not None:
            backend_options = _cluster_options(backend, backend_options)
            backend = _clustered(backend)
        elif backend_options.get("devices") is not None:
            _check_placement_kinds(backend_options)
            backend = _partitioned(backend)
        self.backend = load_backend(backend)(self.graph, **backend_options)
        # A backend whose Variables live elsewhere (a cluster's tasks, the fast backend's device) gives
        # a mapping that reads and writes them there; every other backend keeps them in a
        # ``turnout.store.VariableStore``, which checks each value put in it.
        store = getattr(self.backend, "variable_store", None)
        self.variables: MutableMapping[str, np.ndarray] = store if store is not None else VariableStore(self.graph)
        self._last_result: Optional[RunResult] = None
        # a store's snapshot of its entries, taken before each run and put back if the run raises
        self._snapshot: Optional[Callable[[], Any]] = getattr(self.variables, "snapshot", None)
        # A backend may offer a *lane* for a run it can repeat with less work (the fast backend's
        # ``fast.lane``): fetch key -> lane; a lane's run leaves its result to be built when read.
        self._lane_for = getattr(self.backend, "lane_for", None)
        # a backend that takes device arrays (the fast one) is fed a jax.Array as it is, not through a
        # host copy: on a GPU that copy, and the transfer back, cost more than a small step itself
        self._device_feed: Optional[Callable[[Any], Any]] = getattr(self.backend, "device_feed", None)
        self._lanes: dict[Any, Any] = {}
        self._closed = False  # set by ``close``: every later run is refused
        # the one tensor fetched by the last run that took a lane, and that lane: a loop of runs of
        # one fetch skips the lookup in ``_lanes`` (one Python frame's worth, about 0.5 µs)
        self._last_fetch: Any = _NO_FETCH  # (not None: ``run(None)`` must reach the fetch checks)
        self._last_lane: Optional[Callable[..., Any]] = None
        self._lazy: Optional[tuple[list[Any], dict[str, Any], float]] = None
        # whether runs may carry memory budgets (``_refuse_budgets``)
        self._honours_budgets = bool(getattr(self.backend, "memory_budgets", False))
        # (tensor, dtype, shape) of feeds that passed check_feed -> whether their values still need a
        # per-value range check (``_range_checked``); the other checks depend only on the signature
        self._feeds_ok: dict[tuple[Tensor, np.dtype, tuple[int, ...]], bool] = {}
        # (fetches, run budget) -> the rebuilt run its runs take once one outgrew the gradient stacks
        # (``_budgeted_run``)
        self._rebuilt: dict[tuple[tuple[Tensor, ...], Optional[int]], Any] = {}

    def run(self, fetches: Any, feed_dict: Optional[dict[Any, Any]] = None,
            options: Optional[RunOptions | dict[str, Any]] = None, **kw: Any) -> Any:
        """Compute ``fetches``: a tensor, a node, a name (``'node:index'`` for a tensor, a bare node
        name for a node), or any nested structure of them; a node's value is ``None``."""
        if options is None and not kw:
            if fetches is self._last_fetch:  # a repeat of the last run's one tensor: its newest lane first
                got = self._last_lane(feed_dict, self.variables)  # type: ignore[misc]
                if got is not None:
                    self._lazy = got
                    return got[0][0]
            if self._lanes:  # a repeat of a run its backend offered a lane for
                tp = type(fetches)
                try:  # (a list or tuple only: ``tuple()`` of anything else, a Variable, would iterate it)
                    lanes = self._lanes.get(fetches if tp is Tensor else tuple(fetches)) \
                        if tp is Tensor or tp is list or tp is tuple else None
                except TypeError:  # an unhashable structure of fetches
                    lanes = None
                if lanes is not None:
                    for lane, _ in lanes:
                        got = lane(feed_dict, self.variables)
                        if got is not None:
                            self._lazy = got
                            if tp is Tensor:
                                self._last_fetch, self._last_lane = fetches, lane
                                return got[0][0]
                            # (a lane returns None for the fetches that stand for ops: it was made for them)
                            return tp(got[0])
            opts = _DEFAULT_OPTIONS  # the common call: validated once, never mutated
        elif isinstance(options, RunOptions):  # keywords beside it override its fields, never ignored
            opts = replace(options, **_run_option_fields(kw)) if kw else options
        elif options is None or isinstance(options, Mapping):
            opts = RunOptions(**_run_option_fields({**(options or {}), **kw}))
        else:
            raise ArgumentError("options must be a tn RunOptions or a dict of its fields, "
                                f"not {type(options).__name__}")
        self._check_call(feed_dict)
        if not self._honours_budgets:
            self._refuse_budgets(opts)
        fast = self._run_fast(fetches, feed_dict, opts)
        if fast is not _SLOW:
            return fast
        flat, tensors, targets, feeds = self._resolve(fetches, feed_dict)
        # Node targets are run for their effects: fetch a proxy that depends on them.
        proxies = [_target_proxy(n) for n in targets]
        result = self._backend_run(tensors + proxies, feeds, opts)
        self.last_result = result
        values = iter(result.values[: len(tensors)])
        out = [None if not isinstance(f, Tensor) and isinstance(f, Node) else next(values)
               for f in (fetched_tensor(x) if hasattr(x, "_as_tensor") else x for x in flat)]
        return nest.pack_as(fetches, out)

    def _refuse_budgets(self, opts: RunOptions) -> None:
        """On a backend that does not honour memory budgets (the reference and fast backends, on one
        device, per device when partitioned or on a cluster's tasks, and the small-step system count
        saved values against them; a cluster whose partition executor does not, does not): refuse a
        run budget, and a graph with a loop's own budget, rather than run over it without a word. The
        graph is read once per version (``memory_plan.budgeted_loops``)."""
        from turnout.memory_plan import budgeted_loops

        budgeted = opts.memory_budget is not None
        loops = budgeted_loops(self.graph) if not budgeted else ()
        if budgeted or loops:
            from turnout.errors import UnsupportedError

            what = "memory_budget" if budgeted else f"the memory_budget of loop(s) {sorted(loops)}"
            raise UnsupportedError(f"backend {self.backend_name!r} does not honour {what}: the reference and fast "
                                   "backends (on one device, partitioned over devices, or on a cluster with the "
                                   "reference or fast partition executor) and the small-step system do; run there, "
                                   "or without the budget")

    def explain(self, fetches: Any, feed_dict: Optional[dict[Any, Any]] = None,
                memory_budget: Optional[int] = None) -> RunSchedule:
        """How a run of ``fetches`` with ``feed_dict``'s signature would execute on this session's
        backend, without running it: a ``turnout.run_schedule.RunSchedule`` (print it, or read its
        steps). Fetches and feeds are checked as ``run`` checks them; the fed values matter only
        where they decide a shape. Backends that plan nothing (the interpreters) give one step. Where a
        memory budget applies (``memory_budget``, the run option, or a loop's own), the notes end with
        the memory plan's line per loop (``turnout.memory_plan``), and say which gradients a run that
        outgrows its stacks rebuilds to recompute, or this session's runs already use
        (``turnout.rebuild``)."""
        self._check_call(feed_dict)
        RunOptions(memory_budget=memory_budget)  # checked as ``run`` checks it
        _, tensors, targets, feeds = self._resolve(fetches, feed_dict)
        fetched = tensors + [_target_proxy(n) for n in targets]
        # (fetches whose runs under this budget were rebuilt to recompute: the run they take)
        done = self._rebuilt.get((tuple(fetched), memory_budget)) if memory_budget is not None else None
        if done is not None:
            fetched = done.fetches
        explain = getattr(self.backend, "explain", None)
        if explain is None:
            schedule = RunSchedule(self.backend_name, (Step("interpreter", INTERPRETER_STEP),))
        elif getattr(self.backend, "memory_budgets", False) and memory_budget is not None:
            schedule = explain(fetched, feeds, self.variables, memory_budget=memory_budget)
        else:
            schedule = explain(fetched, feeds, self.variables)
        from turnout.memory_plan import CostModel, backend_platform, graph_plan, measured_costs

        last = self.last_result
        costs = measured_costs(last.stats) if last is not None else CostModel()
        plan = graph_plan(self.graph, fetched, backend_platform(self.backend), memory_budget, costs)
        if not plan.budgeted:
            return schedule  # type: ignore[no-any-return]
        from turnout import rebuild

        lines = [*plan.lines(), *rebuild.explain_lines(self.graph, fetched, plan, done)]
        return replace(schedule, notes=(*schedule.notes, *(f"memory plan: {line}" for line in lines)))

    def _check_call(self, feed_dict: Any) -> None:
        """What ``run`` and ``explain`` refuse before reading their fetches: a closed session, a
        ``feed_dict`` that is not a mapping."""
        if self._closed:
            raise ExecutionError("this session is closed (Session.close() was called): make a new tn.Session "
                                 "to run the graph again")
        if feed_dict is not None and not isinstance(feed_dict, Mapping):
            raise FeedError(f"feed_dict must be a dict from tensors to values, not {type(feed_dict).__name__}")

    def _resolve(self, fetches: Any, feed_dict: Optional[dict[Any, Any]]
                 ) -> tuple[list[Any], list[Tensor], list[Node], dict[Tensor, Any]]:
        """The fetches flattened (names resolved), the tensors and op targets among them, and the
        feeds checked and keyed by tensor: what ``run`` and ``explain`` take from their arguments."""
        flat = [self._named(f) if isinstance(f, str) else f for f in nest.flatten(fetches, "Session.run: fetches")]
        tensors: list[Tensor] = []
        targets: list[Node] = []
        for f in flat:
            if hasattr(f, "_as_tensor"):
                f = fetched_tensor(f)
            if isinstance(f, Tensor):
                if f.graph is not self.graph:
                    raise GraphBuildError(f"fetch {f.name} belongs to another graph")
                tensors.append(f)
            elif isinstance(f, Node):
                targets.append(f)
            else:
                raise GraphBuildError(f"cannot fetch {f!r}: fetches are tensors, nodes or structures of them")
        feeds: dict[Tensor, Any] = {}
        for k, v in (feed_dict or {}).items():
            if isinstance(k, str):
                try:
                    k = self.graph.tensor(k)
                except (KeyError, IndexError, ValueError):
                    raise FeedError(f"feed_dict key {k!r} names no tensor of this graph") from None
            if hasattr(k, "_as_tensor") and not isinstance(k, Tensor):  # a Variable or a TensorArray
                from turnout.variables import Variable

                if isinstance(k, Variable):
                    raise FeedError(f"cannot feed Variable {k.name!r}: feed a Variable by assigning it, "
                                    "not through feed_dict")
                raise FeedError(f"feed_dict key {k!r} is a {type(k).__name__}, which cannot be fed: its "
                                "value comes from the ops that write it; feed a placeholder instead")
            if not isinstance(k, Tensor) or k.graph is not self.graph:
                raise FeedError(f"feed_dict key {k!r} is not a tensor of this graph")
            checked = self._check_feed(k, v)
            if k in feeds and not np.array_equal(feeds[k], checked):
                raise FeedError(f"{k.name} is fed twice in one feed_dict, with different values")
            feeds[k] = checked
        return flat, tensors, targets, feeds

    def _named(self, name: str) -> Tensor | Node:
        """A fetch given by name, as TensorFlow takes one: ``'node:index'`` is that tensor, a bare node
        name the node (run for its effects, fetched as ``None``); a name the graph lacks is a
        ``GraphBuildError``, as any other fetch that is no tensor of the graph."""
        try:
            return self.graph.tensor(name) if ":" in name else self.graph.node(name)
        except (KeyError, IndexError, ValueError):
            raise GraphBuildError(f"cannot fetch {name!r}: no tensor or node of this graph has that name") from None

    def _run_fast(self, fetches: Any, feed_dict: Optional[dict[Any, Any]], opts: RunOptions) -> Any:
        """The common case — one tensor, or a flat list / tuple of tensors and ops (a training step's
        ``[loss, train_op]``), fed by tensor keys — without the generic flatten / pack walk. It performs
        the same checks as the general path, in the same order, so it raises the same errors; anything
        else returns ``_SLOW`` (per-run overhead matters for small programs run many times, see
        ``docs/benchmarks.rst``)."""
        tp = type(fetches)
        graph = self.graph
        targets: Optional[list[bool]] = None  # per fetch, whether it is an op (fetched as None)
        if tp is Tensor:
            tensors = [fetches]
        elif tp is list or tp is tuple:
            tensors = list(fetches)
            ops = [type(f) is Node for f in tensors]
            for f, op in zip(tensors, ops):
                if (op and f.graph is not graph) or not (op or type(f) is Tensor):
                    return _SLOW
            if any(ops):
                targets = ops
        else:
            return _SLOW
        for f in tensors:
            if type(f) is Tensor and f.node.graph is not graph:
                raise GraphBuildError(f"fetch {f.name} belongs to another graph")
        feeds: dict[Tensor, Any] = {}
        if feed_dict:
            for k, v in feed_dict.items():
                if type(k) is not Tensor or k.node.graph is not graph:
                    return _SLOW
                feeds[k] = self._check_feed(k, v)
        if targets is not None:  # an op is run for its effects: fetch its proxy (``_target_proxy``)
            tensors = [_target_proxy(f) if t else f for f, t in zip(tensors, targets)]
        result = self._backend_run(tensors, feeds, opts)
        self.last_result = result
        if self._lane_for is not None and opts is _DEFAULT_OPTIONS:
            lane = self._lane_for(tensors, feeds, feed_dict or {}, targets)
            if lane is not None:  # kept beside the fetches' other lanes (other feed signatures), the newest first
                lanes = self._lanes.setdefault(fetches if tp is Tensor else tuple(fetches), [])
                if all(other is not lane for other, _ in lanes):
                    lanes.insert(0, (lane, targets))
                    del lanes[_LANES_PER_FETCH:]
        if tp is Tensor:
            return result.values[0]
        if targets is not None:
            return tp([None if t else v for t, v in zip(targets, result.values)])
        return tp(result.values[: len(tensors)])

    def _backend_run(self, tensors: list[Tensor], feeds: dict[Tensor, Any], opts: RunOptions,
                     rebuild: bool = True) -> RunResult:
        """The backend's run, all or nothing for Variables: a run that raises leaves
        ``session.variables`` as they were before it (``[E-Var-Assign]`` and the other effects of the
        ops that fired before the error are undone), so the state after an error is the same on every
        backend, whatever order the ops fired in. A store that takes no snapshot (a cluster's, whose
        values live on its tasks) is the backend's to put back: the Ray backend's tasks do
        (``TaskRunner.settle``). Under a memory budget (``rebuild``: not yet looked at), the run may
        take a rebuilt gradient (``_budgeted_run``)."""
        if rebuild and opts.memory_budget is not None and self._honours_budgets:
            return self._budgeted_run(tensors, feeds, opts)
        snapshot = self._snapshot() if self._snapshot is not None else None
        try:
            if current_limit() == opts.max_tensor_bytes:  # the limit already in force: nothing to install
                return self.backend.run(tensors, feeds, self.variables, opts)
            with allocation_limit(opts.max_tensor_bytes):
                return self.backend.run(tensors, feeds, self.variables, opts)
        except BaseException:
            if snapshot is not None:
                self.variables.restore(snapshot)  # type: ignore[attr-defined]
            raise

    def _budgeted_run(self, tensors: list[Tensor], feeds: dict[Tensor, Any], opts: RunOptions) -> RunResult:
        """A run under a memory budget: on the gradient stacks while they fit; a run that outgrows
        them is repeated with each gradient that keeps them rebuilt to recompute from checkpoints
        (``turnout.rebuild``), as are this session's later runs of these fetches under
        this budget (the rebuilt run once made is kept: ``_rebuilt``)."""
        from turnout import rebuild
        from turnout.errors import ResourceExhaustedError
        from turnout.memory_plan import backend_platform

        k = (tuple(tensors), opts.memory_budget)
        done = self._rebuilt.get(k)
        if done is None:
            try:
                return self._backend_run(tensors, feeds, opts, rebuild=False)
            except ResourceExhaustedError as e:
                assert opts.memory_budget is not None
                done = rebuild.rebuilt_run(self.graph, tensors, backend_platform(self.backend), opts.memory_budget, e)
            self._rebuilt[k] = done
        result = self._backend_run(done.fetches, feeds, opts, rebuild=False)
        result.stats["rebuilt_gradients"] = done.lines()
        return result

    @property
    def last_result(self) -> Optional[RunResult]:
        """The ``RunResult`` of the last run (stats, and the trace or firing counts when asked for).
        A run through a backend's lane leaves only its values, stats and time; the ``RunResult`` is
        built here, when read (building it per run cost as much as a small program's call)."""
        lazy = self._lazy
        if lazy is not None:
            values, stats, seconds = lazy
            full = dict(stats)
            full["compiles"] = getattr(self.backend, "compile_count", None)
            full["stage_seconds"] = [seconds]
            self._last_result = RunResult(values=values, stats=full)
            self._lazy = None
        return self._last_result

    @last_result.setter
    def last_result(self, result: Optional[RunResult]) -> None:
        self._last_result = result
        self._lazy = None

    def _check_feed(self, t: Tensor, value: Any) -> np.ndarray:
        """``check_feed``, remembering which (tensor, dtype, shape) combinations passed: every check it
        makes depends only on those, so a repeated feed signature skips straight to the conversion."""
        tv = type(value)
        if tv is np.ndarray:
            arr = value
        elif tv is int or tv is float or tv is bool or isinstance(value, np.generic):
            arr = np.asarray(value)  # a numpy scalar (``np.int32(8)``) is checked like a 0-d array
        elif isinstance(value, np.ndarray):  # a subclass of ndarray (a masked array): every check, each run
            return check_feed(t, value)
        elif hasattr(value, "__array__") and isinstance(getattr(value, "dtype", None), np.dtype):
            deleted = getattr(value, "is_deleted", None)  # a jax.Array donated or deleted: no value left
            if callable(deleted) and deleted():
                raise FeedError(f"feeding {t.name}: the array has been deleted (donated to a jitted call, or "
                                "deleted); feed a live array")
            placed = None
            if self._device_feed is not None and value.dtype == t.dtype.numpy and not t.dtype.is_opaque:
                placed = self._device_feed(value)
            if placed is not None:
                # a device array of exactly the tensor's dtype goes to the backend as it is: every check
                # depends only on its signature (no value can be out of range), made once per signature
                sig = (t, value.dtype, tuple(value.shape))
                if sig not in self._feeds_ok:
                    check_feed(t, value)
                    self._feeds_ok[sig] = False
                return placed  # type: ignore[no-any-return]
            arr = np.asarray(value)  # an array of another library (a jax.Array): checked by its signature
        else:
            return check_feed(t, value)
        sig = (t, arr.dtype, arr.shape)
        per_value = self._feeds_ok.get(sig)
        if per_value is None:  # a new signature: every check
            checked = check_feed(t, value)
            self._feeds_ok[sig] = _range_checked(t.dtype, arr.dtype)
            return checked
        if per_value and not _scalar_fits(t.dtype, value):
            return check_feed(t, value)
        return arr.astype(t.dtype.numpy, copy=False)

    def close(self) -> None:
        """Forget the Variables and stop a backend that holds processes (a cluster's actors); every
        later ``run`` raises ``ExecutionError``. Why refuse rather than start again: a closed session
        that ran would start its Variables from their initial values without a word (a cluster's, whose
        actors are gone, could not run at all), so the same call would mean different things by
        backend; TensorFlow refuses a closed session too. Closing twice is allowed."""
        self.variables.clear()
        self._closed = True
        self._lanes.clear()  # (a lane would run without the session's check)
        self._last_fetch, self._last_lane = _NO_FETCH, None
        stop = getattr(self.backend, "close", None)
        if callable(stop):
            stop()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *a: Any) -> None:
        self.close()


_SLOW = object()  # _run_fast's "take the general path"
_NO_FETCH = object()  # ``Session._last_fetch`` before any run took a lane
#: lanes kept per fetch structure: a run that alternates a few feed shapes keeps one for each, and a
#: run that misses them all has tried only this many
_LANES_PER_FETCH = 4
_DEFAULT_OPTIONS = RunOptions()  # what ``run`` uses when given no options (RunOptions checks itself once)


def _check_placement_kinds(options: Mapping[str, Any]) -> None:
    """``devices`` a collection of device names and ``requests`` a mapping (node name -> device), or
    an ``ArgumentError`` naming the option. Why here: both backends that take them (the partitioned
    reference and fast executors) copied them with ``list`` and ``dict``, so ``devices=3`` was
    Python's "'int' object is not iterable"."""
    devices, requests = options.get("devices"), options.get("requests")
    if isinstance(devices, (str, bytes)) or not isinstance(devices, Iterable):
        raise ArgumentError(f"Session: devices must be a list of device names such as ['cpu:0', 'cpu:1'], "
                            f"got {devices!r}")
    if requests is not None and not isinstance(requests, Mapping):
        raise ArgumentError(f"Session: requests must be a dict of node name -> device, got {requests!r}")


def _partitioned(backend: str) -> str:
    """``devices=[...]`` asks for a partitioned run: the reference backend runs it on the partitioned
    reference executor, the fast one on the fast partitioned executor (both in turnout.devices)."""
    if backend in ("reference", "partitioned"):
        return "partitioned"
    if backend in ("fast", "fast-partitioned"):
        return "fast-partitioned"
    from turnout.errors import UnsupportedError

    raise UnsupportedError(f"backend {backend!r} cannot run a graph partitioned over devices (devices=...); "
                           "use backend='reference' or backend='fast'")


def _cluster_options(backend: str, options: dict[str, Any]) -> dict[str, Any]:
    """``backend="fast"`` with ``cluster=...`` means every task runs its partitions on the compiled
    partition executor (``partition_executor="fast"``); naming another executor as well is a mistake."""
    from turnout.errors import UnsupportedError

    if backend != "fast":
        return options
    chosen = options.get("partition_executor", "fast")
    if chosen != "fast":
        raise UnsupportedError(f"backend='fast' on a cluster runs partition_executor='fast', not {chosen!r}; "
                               "pass one of the two")
    return {**options, "partition_executor": "fast"}


def _clustered(backend: str) -> str:
    """``cluster=...`` asks for a run on a Ray cluster (turnout.devices.ray_runtime, the ``ray`` extra)."""
    from turnout.errors import UnsupportedError

    if backend not in ("reference", "ray", "fast"):
        raise UnsupportedError(f"backend {backend!r} cannot run a graph on a cluster (cluster=...): each task runs "
                               "its partitions on the reference interpreter (backend='reference') or on the "
                               "compiled partition executor (backend='fast')")
    try:
        import ray  # noqa: F401
    except ImportError:
        raise UnsupportedError("running on a cluster needs Ray: pip install 'turnout[ray]'") from None
    return "ray"


def _target_proxy(node: Node) -> Tensor:
    """A root-frame bool constant with a control dependency on ``node``: fetching it runs ``node``."""
    g = node.graph
    cache = g.__dict__.setdefault("_target_proxies", {})
    if node.id not in cache:
        with g._in_context(None), g._no_capture():
            cache[node.id] = g.create_node(
                "Const", (), {"value": np.asarray(True), "dtype": dt.bool_.name}, name=f"{node.name}/target",
                control_inputs=[node],
            ).outputs[0]
    return cache[node.id]  # type: ignore[no-any-return]
