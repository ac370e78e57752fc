"""Laws of the shell around a compiled backend's runs (``turnout.fast.shell``): the run signature and
the Variables' part of it, the keys of plans and programs, the notes a signature's runs taught, the
fallback to the reference executor (warned once, raised where ``fallback=False``), the
specialisation on fed values and the cut at computed ones, the memory budget's stack chunk, and the
sized retry. Each law kills mutants of the full set of ``fast/shell.py`` (issue 40, part 3;
``python tools/mutation.py --module fast/shell.py --all``).

``BackendShell`` is subclassed by a stand-in backend whose compiled run and reference executor
record what they are asked and answer by a rule the test gives: nothing is traced or compiled, so
the file takes about a second after JAX's import. The real backends' runs that fall back,
specialise, cut and retry are in ``test_fast_dynamic_shapes.py`` and ``test_fast_memory.py``.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import jax.numpy as jnp
import numpy as np
import pytest
import test_exports

import turnout as tn
import turnout.reference.executor as reference_executor
from turnout.errors import DeadFetchError, UnsupportedError, ValidationError
from turnout.fast import specialise as sp
from turnout.fast.functionalize import program_key
from turnout.fast.lowering_base import NeedsStatic
from turnout.fast.outcome import Retry
from turnout.fast.regions import key
from turnout.fast.shell import BackendShell, retried, variable_signature
from turnout.fast.variable_store import Deferred
from turnout.fast_options import FastOptions
from turnout.graph import Graph, Tensor
from turnout.session import RunOptions, RunResult
from turnout.slot_sizes import slot_notes
from turnout.specs import TensorSpec

Compile = Callable[[Any, list[Tensor], dict[Tensor, Any], dict[str, Any], Any, dict[Any, Any]], RunResult]


class _Reference:
    """Stands for a reference executor: records each run and answers ``["reference"]``."""

    def __init__(self) -> None:
        self.runs: list[tuple[Any, ...]] = []

    def run(self, fetches: list[Tensor], feeds: dict[Tensor, Any], variables: dict[str, Any], options: Any
            ) -> RunResult:
        self.runs.append((fetches, feeds, variables, options))
        return RunResult(values=["reference"], stats={"route": "interpreted"})


class _Shell(BackendShell):
    """A stand-in compiled backend: ``_compile_run`` records its arguments and answers by ``rule``;
    ``_reference_executor`` makes a recording ``_Reference`` (and counts how many it made)."""

    WHO = "stand-in backend"
    FALLBACK_TO = "the stand-in reference"
    FALLBACK_STATS = {"backend": "stand-in", "executor": "stand-in reference (fallback)"}

    def __init__(self, graph: Graph, options: FastOptions = FastOptions(), rule: Compile | None = None) -> None:
        super().__init__(graph, options)
        self.rule = rule
        self.compiles: list[tuple[Any, ...]] = []
        self.made: list[_Reference] = []

    def _reference_executor(self) -> Any:
        self.made.append(_Reference())
        return self.made[-1]

    def _compile_run(self, sig: Any, fetches: list[Tensor], feeds: dict[Tensor, Any], variables: dict[str, Any],
                     options: Any, static: dict[Any, Any]) -> RunResult:
        self.compiles.append((sig, fetches, dict(feeds), variables, options, dict(static)))
        assert self.rule is not None
        return self.rule(sig, fetches, feeds, variables, options, static)


def _graph() -> tuple[Graph, SimpleNamespace]:
    """A float32 vector fed as ``x``, ``y = x + 1``, an int32 ``n`` fed, and two Variables, ``w`` (made
    first, float32 from a float64 value) and ``a`` (int32)."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [None], name="x")
        y = tn.add(x, tn.constant(np.float32(1.0)), name="y")
        n = tn.placeholder(tn.int32, [], name="n")
        w = tn.Variable(np.float64(1.5), dtype=tn.float32, name="w")
        a = tn.Variable(np.int32(2), name="a")
    return g, SimpleNamespace(x=x, y=y, n=n, w=w, a=a)


# ---- signatures and keys ---------------------------------------------------------------------------------------
def test_a_variable_counts_in_a_signature_by_name_with_its_set_value_or_else_its_initial_value_in_its_dtype() -> None:
    """``variable_signature``: (name, dtype, shape) per Variable, sorted by name; a Variable not set yet
    counts with its initial value in the Variable's dtype (a float64 value of a float32 Variable
    counts as float32); a set value as a numpy array of it (a list of Python ints is int64), a
    deferred device value by its own dtype and shape without a copy; a graph without Variables has
    the empty signature. Kills every part made None, the emptiness, the ``None`` and the
    ``Deferred`` tests inverted, the peek made of None and the value read for None."""
    g, _ = _graph()
    assert variable_signature(tn.Graph(), {"w": np.zeros(1)}) == ()
    f32, i32, i64 = np.dtype(np.float32).str, np.dtype(np.int32).str, np.dtype(np.int64).str
    assert variable_signature(g, {}) == (("a", i32, ()), ("w", f32, ()))
    dev = Deferred(jnp.zeros((2, 3), jnp.float32))
    assert variable_signature(g, {"a": [1, 2, 3], "w": dev}) == (("a", i64, (3,)), ("w", f32, (2, 3)))


def test_a_run_signature_is_the_graph_stamp_the_fetches_the_fed_dtypes_and_shapes_and_the_variables() -> None:
    """``_run_signature``: the graph's ``edits``, each fetch's key in order, each feed's key, dtype and
    shape sorted, and ``variable_signature``. Kills each part made None, a feed's shape taken of None
    and the Variables' part given None or no graph."""
    g, t = _graph()
    s = _Shell(g)
    feeds = {t.x: np.zeros(4, np.float32), t.n: np.int32(2)}
    sig = s._run_signature([t.y, t.x], feeds, {"w": np.ones((1, 2), np.float32)})
    f32, i32 = np.dtype(np.float32).str, np.dtype(np.int32).str
    want_feeds = tuple(sorted([(t.x.node.id, 0, f32, (4,)), (t.n.node.id, 0, i32, ())]))
    assert sig == (g.edits, (key(t.y), key(t.x)), want_feeds,
                   (("a", i32, ()), ("w", f32, (1, 2))))


def test_validation_refuses_a_fetch_or_a_feed_of_another_graph_and_gives_the_graphs_frames() -> None:
    """``_validate``: the graph checked with the run's fetches and feeds (``turnout.validate``), so a
    fetch or a feed of another graph is a ``ValidationError``; a good run gets the frame analysis.
    Kills the graph, the fetches or the feeds given as None or left out."""
    g, t = _graph()
    _, other = _graph()
    s = _Shell(g)
    assert s._validate([t.y], {t.x: np.zeros(2, np.float32)}) is not None
    with pytest.raises(ValidationError):
        s._validate([other.y], {t.x: np.zeros(2, np.float32)})
    with pytest.raises(ValidationError):
        s._validate([t.y], {other.x: np.zeros(2, np.float32)})


def test_a_plan_is_keyed_on_its_signature_chunk_specialised_values_and_the_programs_learnt_slots() -> None:
    """``_plan_key`` and ``_program_key``: (signature, stack chunk, the specialised values' bytes, the
    slot capacity learnt for the run's program), the program being ``functionalize.program_key`` of
    the graph, fetches and feeds. Kills the values given None, the capacity asked of None and the
    program key given None or missing its graph, fetches or feeds."""
    g, t = _graph()
    s = _Shell(g)
    feeds = {t.n: np.int32(3)}
    program = program_key(g, [t.y], feeds)
    assert s._program_key([t.y], feeds) == program
    s.slot_sizes.learnt[program] = 16
    static = {key(t.n): np.asarray(3, np.int32)}
    assert s._plan_key("sig", [t.y], feeds, 8, static) == ("sig", 8, sp.static_signature(static), 16)


def test_a_signatures_notes_are_what_specialising_taught_then_the_checkpoint_slots_with_the_learnt_capacity() -> None:
    """``_learnt_notes``: the notes of the values a signature's plans are specialised on (none for a
    signature not specialised), followed by the slots' notes of its plan, which say the count was
    learnt where the program learnt a capacity. Kills the two joined by ``-``, the graph, the
    specialisation, the budgets, the counts or the capacity given None or left out, the signature
    looked up by None, the default made None or dropped, and the program key given None."""
    g, t = _graph()
    s = _Shell(g)
    feeds = {t.n: np.int32(3)}
    s._static_keys["sig"] = sp.Specialisation(static=frozenset({key(t.n)}))
    s.slot_sizes.learnt[program_key(g, [t.y], feeds)] = 4
    slots: Any = SimpleNamespace(budgets={"loop": 8}, counts={"loop": 4})
    taught = sp.specialisation_notes(g, s._static_keys["sig"])
    learnt = slot_notes({"loop": 8}, {"loop": 4}, 4)
    assert taught and learnt and learnt != slot_notes({"loop": 8}, {"loop": 4}, None)
    assert s._learnt_notes("sig", [t.y], feeds, slots) == taught + learnt
    assert s._learnt_notes("other", [t.y], feeds, slots) == learnt


# ---- a new shell ----------------------------------------------------------------------------------------------
def test_a_new_shell_has_compiled_nothing_learnt_nothing_and_holds_no_memory_records() -> None:
    """A backend just made: its graph and options as given, no trace made, no slot capacity learnt,
    nothing fallen back or specialised, no reference executor yet, and no memory records, handed out
    as copies. Kills each of them made None, the compile count started at 1 and the reference made
    ``""``."""
    g, _ = _graph()
    opts = FastOptions(stack_chunk=16)
    s = _Shell(g, opts)
    assert s.graph is g and s.options is opts and s.compile_count == 0 and s.slot_sizes.learnt == {}
    assert s._fallback == {} and s._static_keys == {} and s._reference is None and s.memory_records() == []
    s._records = [{"loop": "l", "device_bytes": 8}]
    got = s.memory_records()
    assert got == s._records and got[0] is not s._records[0]


# ---- fallback --------------------------------------------------------------------------------------------------
def _refuse(*_: Any) -> RunResult:
    raise UnsupportedError("no lowering for Foo")


def test_a_compiled_run_gets_the_runs_arguments_and_its_result_is_the_runs() -> None:
    """``_run_or_fall_back`` with a program that compiles: ``compiled`` is called with the signature,
    fetches, feeds, Variables and options, and its result returned; no reference executor is made.
    Kills each argument given None or left out and the fallback test made ``or``."""
    g, t = _graph()
    s = _Shell(g)
    seen: list[tuple[Any, ...]] = []
    ok = RunResult(values=[1])

    def compiled(*args: Any) -> RunResult:
        seen.append(args)
        return ok

    feeds, variables, opts = {t.x: np.zeros(2, np.float32)}, {"w": np.float32(1)}, RunOptions()
    assert s._run_or_fall_back("sig", compiled, [t.y], feeds, variables, opts) is ok
    assert seen == [("sig", [t.y], feeds, variables, opts)] and s.made == []
    s._fallback["other sig"] = "refused before"
    assert s._run_or_fall_back("sig", compiled, [t.y], feeds, variables, opts) is ok and s.made == []


def test_a_program_that_cannot_compile_runs_on_the_reference_warned_once_with_host_feeds() -> None:
    """An ``UnsupportedError`` from the compiled run: a ``RuntimeWarning`` of its message and the
    executor run instead, the run made on the reference executor with the same fetches, Variables
    and options and the feeds on the host (a JAX array as numpy, a numpy value as it is), its stats
    marked with the fallback and its reason, and the memory records emptied. The next run of that
    signature goes to the same reference executor at once, without compiling or warning. Kills
    every argument of either reference run given None or left out, the fallback test inverted, the
    reason made None, the warning's message, category or level changed, the reference made again or
    made None, the host feeds made None, always or never converted or converted from None, the
    records made None and the stats' key renamed or made None."""
    g, t = _graph()
    s = _Shell(g)
    s._records = [{"loop": "l"}]
    calls: list[Any] = []

    def compiled(*args: Any) -> RunResult:
        calls.append(args)
        return _refuse()

    kept = np.int32(3)
    feeds: dict[Tensor, Any] = {t.x: jnp.asarray([1.0, 2.0], jnp.float32), t.n: kept}
    variables, opts = {"w": np.float32(1)}, RunOptions()
    with pytest.warns(RuntimeWarning) as caught:
        got = s._run_or_fall_back("sig", compiled, [t.y], feeds, variables, opts)
    assert [str(w.message) for w in caught] == [
        "no lowering for Foo; this program runs on the stand-in reference instead (at interpreter speed)"]
    assert got.values == ["reference"] and len(s.made) == 1 and s._records == [] and s.memory_records() == []
    assert got.stats == {"route": "interpreted", **_Shell.FALLBACK_STATS, "fallback_reason": "no lowering for Foo"}
    assert s._fallback == {"sig": "no lowering for Foo"}
    (fetches, host, vs, o), = s.made[0].runs
    assert fetches == [t.y] and vs is variables and o is opts and set(host) == {t.x, t.n}
    assert type(host[t.x]) is np.ndarray and np.array_equal(host[t.x], [1.0, 2.0]) and host[t.n] is kept
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = s._run_or_fall_back("sig", compiled, [t.y], feeds, variables, opts)
    assert len(calls) == 1 and len(s.made) == 1 and len(s.made[0].runs) == 2
    assert again.stats["fallback_reason"] == "no lowering for Foo"
    fetches2, host2, vs2, o2 = s.made[0].runs[1]
    assert fetches2 == [t.y] and vs2 is variables and o2 is opts and host2[t.n] is kept


def _fall_back_inside_turnout(s: _Shell, compiled: Any, fetches: list[Tensor]) -> int:
    """The shell's fallback reached through a frame of Turnout's own (code compiled under the name of
    ``reference/executor.py`` stands for one), as a backend's ``run`` reaches it; the line of this
    function that calls it."""
    code = compile("s._run_or_fall_back('sig', compiled, fetches, {}, {}, RunOptions())",
                   reference_executor.__file__, "exec")
    line = inspect.currentframe().f_lineno + 1  # type: ignore[union-attr]
    exec(code, {"s": s, "compiled": compiled, "fetches": fetches, "RunOptions": RunOptions})
    return line


def test_the_fallback_warning_names_the_line_outside_turnout_that_led_to_it() -> None:
    """The warning is attributed to the innermost frame outside Turnout (``graph.warn_user``),
    however many of Turnout's frames lie between: here none, then one (the line that called into it).
    Kills the level made None or left out."""
    g, t = _graph()
    with pytest.warns(RuntimeWarning) as caught:
        line = inspect.currentframe().f_lineno + 1  # type: ignore[union-attr]
        _Shell(g)._run_or_fall_back("sig", _refuse, [t.y], {}, {}, RunOptions())
    assert (caught[0].filename, caught[0].lineno) == (__file__, line)
    with pytest.warns(RuntimeWarning) as caught:
        line = _fall_back_inside_turnout(_Shell(g), _refuse, [t.y])
    assert (caught[0].filename, caught[0].lineno) == (__file__, line)


def test_a_sessions_fallback_warning_names_the_users_run_line() -> None:
    """Regression: the fast backend's fallback warning named a line of ``turnout/session.py`` (a fixed
    ``stacklevel=5`` counted from the shell, while the session's fast path reaches it through seven
    frames of Turnout's); it names the user's ``sess.run`` line. A loop variable that grows, under
    a gradient, has no fixed-shape carry, so the program falls back."""
    g = tn.Graph()
    with g.as_default():
        w = tn.placeholder(tn.float32, [], name="w")
        _, x = tn.while_loop(lambda i, x: i < 3, lambda i, x: (i + 1, tn.concat([x, x * w], 0)),
                             [tn.constant(0), tn.reshape(w, [1])], shape_invariants=[[], [None]])
        (dw,) = tn.gradients(tn.reduce_sum(x), [w])
    sess = tn.Session(g, backend="fast")
    with pytest.warns(RuntimeWarning, match="reference interpreter") as caught:
        line = inspect.currentframe().f_lineno + 1  # type: ignore[union-attr]
        sess.run([x, dw], {w: np.float32(2.0)})
    assert (caught[0].filename, caught[0].lineno) == (__file__, line)


def test_a_program_that_cannot_compile_raises_where_fallback_is_off() -> None:
    """``fallback=False``: the compiled run's ``UnsupportedError`` is raised, nothing recorded and no
    reference made. Kills the option's test inverted."""
    g, t = _graph()
    s = _Shell(g, FastOptions(fallback=False))
    with pytest.raises(UnsupportedError, match="no lowering for Foo"):
        s._run_or_fall_back("sig", _refuse, [t.y], {}, {}, RunOptions())
    assert s._fallback == {} and s.made == []


# ---- specialisation ---------------------------------------------------------------------------------------------
def test_a_run_whose_shape_needs_a_fed_value_is_compiled_again_specialised_on_it() -> None:
    """``_run_specialised``: a compile that raises ``NeedsStatic`` naming a fed tensor is compiled
    again, on the same signature, fetches, feeds, Variables and options, with that feed's value as
    a constant; the result is that run's, its stats naming the feed, and the signature remembers
    it. Kills every argument of the run or of the compile given None or left out, the result taken
    as the values, the signature recomputed without a cut, the specialisation's stats made None or
    given None or no graph, specialisation or values, and the signature looked up by None."""
    g, t = _graph()

    def rule(sig: Any, fetches: list[Tensor], feeds: dict[Tensor, Any], variables: Any, options: Any,
             static: dict[Any, Any]) -> RunResult:
        if key(t.n) not in static:
            raise NeedsStatic("the size of y needs n", frozenset({key(t.n)}))
        return RunResult(values=[int(static[key(t.n)]) * 2])

    s = _Shell(g, rule=rule)
    feeds, variables, opts = {t.n: np.int32(3)}, {"w": np.float32(1)}, RunOptions()
    got = s._run_specialised("sig", [t.y], feeds, variables, opts)
    assert got.values == [6] and got.stats == {"specialized_on": [t.n.name]}
    assert [c[:5] for c in s.compiles] == [("sig", [t.y], feeds, variables, opts)] * 2
    assert s.compiles[0][5] == {} and list(s.compiles[1][5]) == [key(t.n)] and s.compiles[1][5][key(t.n)] == 3
    assert s._static_keys == {"sig": sp.Specialisation(static=frozenset({key(t.n)}))}


def test_a_shape_that_needs_a_value_not_fed_falls_back_with_the_traces_words() -> None:
    """A ``NeedsStatic`` naming a tensor that is not fed teaches nothing: the run is refused with the
    trace's own message (``Specialise.of``). Kills the outcome made of None."""
    g, t = _graph()

    def rule(*_: Any) -> RunResult:
        raise NeedsStatic("the size of y needs x's value", frozenset({key(t.x)}))

    s = _Shell(g, rule=rule)
    with pytest.raises(UnsupportedError) as e:
        s._run_specialised("sig", [t.y], {t.n: np.int32(3)}, {}, RunOptions())
    assert str(e.value) == "the size of y needs x's value"


def _cut_graph() -> tuple[Graph, SimpleNamespace]:
    """``x`` fed, ``c = x * 2`` (the tensor a run is cut at), ``out = c + 1``, and a Variable apart."""
    g = tn.Graph()
    with g.as_default():
        tn.Variable(np.float32(0.0), name="v")
        x = tn.placeholder(tn.float32, [None], name="x")
        c = tn.multiply(x, tn.constant(np.float32(2.0)), name="c")
        out = tn.add(c, tn.constant(np.float32(1.0)), name="out")
    return g, SimpleNamespace(x=x, c=c, out=out)


def test_a_run_cut_at_a_computed_tensor_fetches_it_first_then_runs_with_it_fed() -> None:
    """A ``NeedsStatic`` naming a computed tensor ``cut``: an earlier run of the same backend fetches
    it (its own signature: the fetch of that tensor with the run's feeds and Variables), then the
    program runs with it fed, under the signature of the run so fed; the stats name the cut.
    Kills every argument of the fetch, of its signature, of ``computed`` (graph, cut, fed keys, the
    fetch) and of ``with_computed`` given None or left out, a fed key made of None, the signature of
    the fed run made None, always or never recomputed or computed without its fetches, feeds or
    Variables, and the fetched values or the compute left out of ``run_specialised``."""
    g, t = _cut_graph()

    def rule(sig: Any, fetches: list[Tensor], feeds: dict[Tensor, Any], variables: Any, options: Any,
             static: dict[Any, Any]) -> RunResult:
        if fetches == [t.c]:
            return RunResult(values=[np.arange(3, dtype=np.float32)])
        if t.c not in feeds:
            raise NeedsStatic("c's shape only a run tells", frozenset(), cut=frozenset({key(t.c)}))
        return RunResult(values=[float(np.sum(feeds[t.c]))])

    s = _Shell(g, rule=rule)
    xs = np.zeros(3, np.float32)
    feeds, variables, opts = {t.x: xs}, {"v": np.float32(1)}, RunOptions()
    got = s._run_specialised("sig", [t.out], feeds, variables, opts)
    assert got.values == [3.0] and got.stats == {"cut_at": [t.c.name]}
    first, fetch, fed_run = s.compiles
    assert first == ("sig", [t.out], feeds, variables, opts, {})
    assert fetch == (s._run_signature([t.c], feeds, variables), [t.c], feeds, variables, opts, {})
    fed = fed_run[2]
    assert set(fed) == {t.x, t.c} and fed[t.x] is xs and np.array_equal(fed[t.c], [0.0, 1.0, 2.0])
    assert fed_run[0] == s._run_signature([t.out], fed, variables) != "sig"
    assert fed_run[1] == [t.out] and fed_run[3] is variables and fed_run[4] is opts and fed_run[5] == {}


def test_a_cut_at_a_tensor_dead_in_the_run_is_refused_in_the_backends_name() -> None:
    """Where the run that would fetch the cut tensor finds it dead, the program is refused with an
    ``UnsupportedError`` naming the backend (``WHO``). Kills the name made None or left out."""
    g, t = _cut_graph()

    def rule(sig: Any, fetches: list[Tensor], *_: Any) -> RunResult:
        if fetches == [t.c]:
            raise DeadFetchError("c is dead")
        raise NeedsStatic("c's shape only a run tells", frozenset(), cut=frozenset({key(t.c)}))

    s = _Shell(g, rule=rule)
    with pytest.raises(UnsupportedError) as e:
        s._run_specialised("sig", [t.out], {t.x: np.zeros(2, np.float32)}, {}, RunOptions())
    assert str(e.value).startswith("stand-in backend: the run would be cut at a tensor that is dead")


# ---- memory budgets ---------------------------------------------------------------------------------------------
def _budgeted_graph() -> Graph:
    """A graph holding one gradient stack of a loop with a memory budget of its own."""
    g = tn.Graph()
    g.create_node("StackNew", [], {"memory_budget": 1 << 20, "loop_name": "loop"}, name="stack",
                  specs=[TensorSpec(tn.int32, ())])
    return g


def test_a_budget_applies_where_the_run_has_one_or_a_loop_has_its_own() -> None:
    """``_budgeted``: the run's budget, or any loop's own. Kills ``or`` made ``and``, the run's test
    inverted and the loops asked of None or taken as None."""
    plain, own = _Shell(tn.Graph()), _Shell(_budgeted_graph())
    assert not plain._budgeted(None) and plain._budgeted(1000) and plain._budgeted(0)
    assert own._budgeted(None) and own._budgeted(1000)


def _x64() -> bool:
    """Whether 64-bit mode is on where this is called (a 64-bit numpy value keeps its type)."""
    return bool(jnp.asarray(np.zeros(1, np.int64)).dtype == np.int64)


class _Plan:
    """Stands for a ``StepPlan``: records the chunk it was made at and the budget asked of it (and
    whether 64-bit mode was on), and answers with ``budget``."""

    def __init__(self, budget: Any) -> None:
        self.budget_given = budget
        self.asked: list[tuple[Any, ...]] = []

    def at(self, chunk: int) -> _Plan:
        self.asked.append(("at", chunk))
        return self

    def budget(self, run_budget: Any) -> Any:
        self.asked.append(("budget", run_budget, _x64()))
        return self.budget_given


def test_a_budgeted_run_starts_at_the_smaller_of_its_chunk_and_the_capacity_its_budget_holds() -> None:
    """``_budgeted_chunk``: without a budget, ``stack_chunk`` and no memory plan (no plan made);
    with one, the plan at ``stack_chunk`` asked (in 64-bit mode) for its memory plan under the run's
    budget: none, or one without a capacity, leaves ``stack_chunk``; a capacity below it is taken, one
    above it is not. Kills the chunk made None, the budget's test inverted or asked of None, 64-bit
    mode made None or off, the memory plan made None or asked for None, the plan made at None, the
    capacity made None, always or never read, its test inverted, and ``min`` given None or one
    argument."""
    opts = FastOptions(stack_chunk=64)
    plain, own = _Shell(tn.Graph(), opts), _Shell(_budgeted_graph(), opts)
    unused = _Plan(None)
    assert plain._budgeted_chunk(None, unused.at) == (64, None) and unused.asked == []
    none = _Plan(None)
    assert plain._budgeted_chunk(5000, none.at) == (64, None)
    assert none.asked == [("at", 64), ("budget", 5000, True)]
    for cap, want in ((None, 64), (16, 16), (256, 64)):
        mp = SimpleNamespace(capacity=lambda c=cap: c)
        plan = _Plan(mp)
        assert own._budgeted_chunk(None, plan.at) == (want, mp)
        assert plan.asked == [("at", 64), ("budget", None, True)]


# ---- the sized retry --------------------------------------------------------------------------------------------
def test_a_run_is_retried_at_each_capacity_a_retry_names_in_64_bit_mode() -> None:
    """``retried``: ``run_at(cap)``, then again at each ``Retry``'s capacity until a result: (the
    result, the capacity that held, the number of retries), every call in 64-bit mode; a first run
    that holds has no retry. Kills the count made None or started at 1, 64-bit mode made None or
    off, the loop never entered, the result made None or the call given None, the ``Retry`` test
    inverted, the capacity and count made None, and the count moved by -1 or 2."""
    asked: list[tuple[int, bool]] = []
    answers: list[Any] = [Retry(8), Retry(32), "done"]
    before = _x64()  # (another test of the worker's process may have left 64-bit mode on)

    def run_at(cap: int) -> Any:
        asked.append((cap, _x64()))
        return answers.pop(0)

    assert retried(4, run_at) == ("done", 32, 2)
    assert asked == [(4, True), (8, True), (32, True)]
    assert retried(4, lambda cap: cap * 10) == (40, 4, 0)
    assert _x64() == before  # (64-bit mode is the call's only: restored after it)


def test_the_module_exports_what_it_defines() -> None:
    """``__all__`` names only what the module defines (``test_exports``'s law, for this module). Kills
    every mutant of ``__all__`` (a name renamed, or ``None``)."""
    test_exports.test_every_exported_name_exists("turnout.fast.shell")
