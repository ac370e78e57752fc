"""The theorems of the Turnout semantics, checked on generated programs (docs/design.rst, "How correctness is checked").

Each test is named after the theorem it checks. Programs come from ``tests/strategies.py`` (swarm
generation over structured programs, lowered by the builders); every check also has a direct
oracle, ``programs.interpret``, that owes nothing to the graph. The checks themselves live in plain
functions (``check_*``) so that ``tests/test_mutations.py`` and ``tools/campaign.py`` reuse them.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from programs import Built, Program, assert_values_equal, build, interpret, to_source
from strategies import float_programs, inputs_for, programs, programs_with_inputs, raw_graphs_ill_formed

import turnout as tn
from turnout.errors import ValidationError
from turnout.primitives import CONTROL_FLOW
from turnout.semantics import smallstep, structured
from turnout.session import RunOptions
from turnout.validate import validate

#: Guards against non-termination: generated loops run at most a few iterations, nested three deep.
GUARD = RunOptions(max_firings=200_000, max_iterations=1_000)
SCHEDULES = [RunOptions("fifo"), RunOptions("lifo"), *(RunOptions("random", seed=s) for s in range(3))]


def run_reference(b: Built, inputs: dict[str, Any], options: RunOptions = GUARD) -> tn.session.RunResult:
    sess = tn.Session(b.graph)
    sess.run(b.fetches, b.feed_dict(inputs), options=options)
    assert sess.last_result is not None
    return sess.last_result


def _traced(opts: RunOptions) -> RunOptions:
    return RunOptions(opts.scheduler, opts.seed, True, GUARD.max_firings, GUARD.max_iterations)


# ---------------------------------------------------------------------------------------------------
# The checks (shared with test_mutations.py and tools/campaign.py)
# ---------------------------------------------------------------------------------------------------
def check_confluence_schedulers(p: Program, inputs: dict[str, Any]) -> None:
    """[T1-Confluence], sampled: FIFO, LIFO and seeded random schedulers give identical outputs."""
    b = build(p)
    first = run_reference(b, inputs, _traced(SCHEDULES[0]))
    for opts in SCHEDULES[1:]:
        other = run_reference(b, inputs, _traced(opts))
        assert_values_equal(other.values, first.values, f"scheduler {opts.scheduler}/{opts.seed} vs fifo")
        assert other.counts == first.counts, f"firing counts differ under {opts.scheduler}/{opts.seed}"


def check_adequacy(p: Program, inputs: dict[str, Any], smallstep_too: bool = True) -> None:
    """[T2-Adequacy]: reference == structured evaluator == small-step == the AST interpreter."""
    want = interpret(p, inputs).values
    b = build(p)
    feeds = b.feed_dict(inputs)
    ref = run_reference(b, inputs).values
    assert_values_equal(ref, want, "reference vs AST interpreter")
    st_vals = structured.evaluate(b.graph, b.fetches, feeds).values
    assert_values_equal(st_vals, want, "structured evaluator vs AST interpreter")
    if smallstep_too:
        ss = smallstep.run(b.graph, b.fetches, feeds, max_steps=50_000).values
        assert_values_equal(ss, want, "small-step vs AST interpreter")


def check_exactly_once(p: Program, inputs: dict[str, Any], options: RunOptions = GUARD) -> None:
    """[T3-Exactly-Once]: each (node, tag) fires at most once; per loop instance the counter's Merge fires
    live trip count + 1 times and the body's counter input trip count times; trip counts agree with
    the structured evaluator and the AST interpreter."""
    b = build(p)
    res = run_reference(b, inputs, _traced(options))
    assert res.counts is not None and res.trace is not None
    over = {k: v for k, v in res.counts.items() if v > 1}
    assert not over, f"fired more than once: {sorted(over.items())[:5]}"
    live = Counter((e.node, e.tag) for e in res.trace.events if not e.dead)
    sres = structured.evaluate(b.graph, b.fetches, b.feed_dict(inputs))
    oracle = interpret(p, inputs)
    for lid, ctx in b.loops.items():
        merge, body_in = ctx.loop_vars[0].merge.name, ctx.loop_vars[0].body_input.name
        instances = {k: v for k, v in sres.trip_counts.items() if k[0] == ctx.frame_name}
        for (frame, parent), trips in instances.items():
            at = [(n, t) for (n, t) in live if t and t[:-1] == parent and t[-1][0] == frame]
            merges = sum(1 for n, _ in at if n == merge)
            bodies = sum(1 for n, _ in at if n == body_in)
            assert merges == trips + 1, f"{lid} at {parent}: counter Merge fired live {merges} times, trips {trips}"
            assert bodies == trips, f"{lid} at {parent}: body ran {bodies} times, trips {trips}"
        if instances:  # the loop takes part in the run (not pruned): its trip counts are the oracle's
            assert sorted(instances.values()) == sorted(oracle.trips.get(lid, [])), (
                f"{lid}: trip counts {sorted(instances.values())} but the AST interpreter says "
                f"{sorted(oracle.trips.get(lid, []))}")


def check_window(p: Program, inputs: dict[str, Any], options: RunOptions = GUARD) -> None:
    """``parallel_iterations`` (docs/design.rst, "The model"): at no point of the reference trace does a frame
    instance have more than ``parallel_iterations`` iterations started and not yet retired, and
    iterations retire in order."""
    b = build(p)
    res = run_reference(b, inputs, _traced(options))
    assert res.trace is not None
    window = {ctx.frame_name: ctx.parallel_iterations for ctx in b.loops.values()}
    started: dict[tuple[Any, str], set[int]] = {}
    retired: dict[tuple[Any, str], list[int]] = {}
    for e in res.trace.events:
        if e.node.endswith("#retire"):
            key = (e.tag[:-1], e.tag[-1][0])
            done = retired.setdefault(key, [])
            assert not done or e.tag[-1][1] == done[-1] + 1, f"{key}: iteration {e.tag[-1][1]} retired after {done}"
            assert e.tag[-1][1] in started.get(key, set()), f"{key}: iteration {e.tag[-1][1]} retired unstarted"
            done.append(e.tag[-1][1])
            continue
        for d, (frame, k) in enumerate(e.tag):
            key = (e.tag[:d], frame)
            started.setdefault(key, set()).add(k)
            outstanding = len(started[key]) - len(retired.get(key, []))
            assert outstanding <= window.get(frame, 10), (
                f"{frame} at {e.tag[:d]}: {outstanding} iterations outstanding, parallel_iterations="
                f"{window.get(frame)}")


def check_quiescence(p: Program, inputs: dict[str, Any]) -> None:
    """[T4-Quiescence], positive half: a well-formed program ends with every fetch produced and no
    inbox left waiting (no live token stranded)."""
    b = build(p)
    validate(b.graph, b.fetches)
    res = run_reference(b, inputs)
    assert len(res.values) == len(b.fetches) and all(v is not None for v in res.values)
    assert res.stats.get("stranded_inboxes", 0) == 0, f"stranded inboxes: {res.stats}"


def check_deadness(p: Program, inputs: dict[str, Any]) -> None:
    """[T5-Deadness-Soundness]: the (node, tag) pairs the reference fires live are exactly those the
    structured evaluator runs, on the ops both record (the structured evaluator does not record the
    control primitives, which it interprets as Python control flow)."""
    b = build(p)
    res = run_reference(b, inputs, _traced(GUARD))
    assert res.trace is not None
    ops = {n.name: n.op for n in b.graph.nodes}
    sres = structured.evaluate(b.graph, b.fetches, b.feed_dict(inputs))

    def keep(name: str) -> bool:
        return name in ops and ops[name] not in CONTROL_FLOW  # trace events like "F#retire" are not ops

    ref_live = {(n, t) for n, t in res.trace.live_firings() if keep(n)}
    st_live = {(n, t) for n, t in sres.live if keep(n)}
    assert ref_live == st_live, (
        f"live in reference only: {sorted(ref_live - st_live)[:6]}; "
        f"live in structured only: {sorted(st_live - ref_live)[:6]}")


def check_z3_prediction(p: Program, inputs: dict[str, Any]) -> None:
    """The z3 encoding's bounded symbolic execution predicts the reference's outputs (int programs)."""
    from turnout.semantics import symbolic

    b = build(p)
    ref = run_reference(b, inputs).values
    pred = symbolic.predict(b.graph, b.fetches, {b.placeholders[n]: v for n, v in inputs.items()}, bound=64)
    got = [np.asarray(v, dtype=t.dtype.numpy) for v, t in zip(pred, b.fetches, strict=True)]
    assert_values_equal(got, ref, "z3 prediction vs reference")


def _explain(p: Program, inputs: dict[str, Any]) -> str:
    return f"\n{to_source(p)}\ninputs: {inputs}"


# ---------------------------------------------------------------------------------------------------
# The theorems
# ---------------------------------------------------------------------------------------------------
@given(programs_with_inputs())
def test_T1_confluence_schedulers(pi: tuple[Program, dict[str, Any]]) -> None:
    check_confluence_schedulers(*pi)


@settings(max_examples=max(1, settings.default.max_examples // 5))  # each example explores every schedule
@given(programs_with_inputs(int_only=True, max_depth=1, max_stmts=1, max_bound=2, max_vars=1, scan=False,
                            case=False, loops=True))
def test_T1_confluence_exhaustive(pi: tuple[Program, dict[str, Any]]) -> None:
    from turnout.semantics.explore import check_confluence

    p, inputs = pi
    b = build(p)
    try:
        cex = check_confluence(b.graph, b.fetches, b.feed_dict(inputs), max_states=20_000)
    except tn.NonTerminationError:
        # No verdict within the state budget: the generator keeps programs tiny so this is rare; the
        # sampled test above covers such programs.
        return
    assert cex is None, f"{cex}{_explain(p, inputs)}"


@given(programs_with_inputs())
def test_T2_adequacy(pi: tuple[Program, dict[str, Any]]) -> None:
    check_adequacy(*pi)


@given(programs_with_inputs(loops=True), st.sampled_from(SCHEDULES))
def test_T3_exactly_once(pi: tuple[Program, dict[str, Any]], opts: RunOptions) -> None:
    check_exactly_once(*pi, options=opts)


@given(programs_with_inputs(loops=True), st.sampled_from(SCHEDULES))
def test_T3_parallel_iterations_window(pi: tuple[Program, dict[str, Any]], opts: RunOptions) -> None:
    check_window(*pi, options=opts)


@given(programs_with_inputs())
def test_T4_quiescence(pi: tuple[Program, dict[str, Any]]) -> None:
    check_quiescence(*pi)


@given(raw_graphs_ill_formed())
def test_T4_ill_formed_graphs_are_rejected_before_running(bad: Any) -> None:
    from turnout.reference import executor

    with pytest.raises(ValidationError) as info:
        validate(bad.graph, bad.fetches)
    assert info.value.rule == bad.rule, f"{bad.kind}: rejected by [{info.value.rule}], expected [{bad.rule}]"

    def never(self: Any) -> None:
        raise AssertionError(f"{bad.kind}: an ill-formed graph started executing")

    saved = executor.Interpreter.run
    executor.Interpreter.run = never  # type: ignore[method-assign]
    try:
        with pytest.raises(ValidationError):
            tn.Session(bad.graph).run(bad.fetches, {t: 1 for t in _placeholders(bad.graph)})
    finally:
        executor.Interpreter.run = saved  # type: ignore[method-assign]


def _placeholders(g: tn.Graph) -> list[tn.Tensor]:
    return [n.outputs[0] for n in g.nodes if n.op == "Placeholder"]


@given(programs_with_inputs())
def test_T5_deadness_soundness(pi: tuple[Program, dict[str, Any]]) -> None:
    check_deadness(*pi)


@given(programs_with_inputs(int_only=True, scan=False))
def test_z3_prediction_matches_reference(pi: tuple[Program, dict[str, Any]]) -> None:
    check_z3_prediction(*pi)


@given(programs(), st.data())
def test_generated_programs_print_and_build(p: Program, data: Any) -> None:
    """The generator's own contract: every program prints, builds, validates and its AST interpreter
    agrees with itself on re-run (a sanity check of the oracle, not of an executor)."""
    src = to_source(p)
    assert src.startswith("def program(")
    b = build(p)
    validate(b.graph, b.fetches)
    inputs = data.draw(inputs_for(p))
    a, c = interpret(p, inputs), interpret(p, inputs)
    assert_values_equal(a.values, c.values, "AST interpreter re-run")
    assert a.trips == c.trips and a.branches == c.branches


@given(float_programs(), st.data())
def test_T2_adequacy_float_programs(p: Program, data: Any) -> None:
    """The gradient generator's programs (T6 uses them) run alike everywhere, and keep their promise:
    float values use only differentiable ops, and only int values steer control flow."""
    from programs import FLOATS, Bin, Case, Cast, Cmp, If, Let, Loop, Unary, walk

    def exprs(e: Any) -> list[Any]:
        out = [e]
        for k in ("lhs", "rhs", "operand"):
            if hasattr(e, k):
                out += exprs(getattr(e, k))
        return out

    for s, _ in walk(p.body):
        steering = [s.pred] if isinstance(s, If) else [s.index] if isinstance(s, Case) else []
        if isinstance(s, Loop):
            steering = list(s.pred.results)
        for e in (x for root in steering for x in exprs(root)):
            assert not (isinstance(e, Cmp) and e.lhs.dtype in FLOATS), f"a float steers control flow:\n{to_source(p)}"
        if isinstance(s, Let):
            for e in exprs(s.expr):
                assert not isinstance(e, Cast)
                if e.dtype in FLOATS and isinstance(e, (Bin, Unary)):
                    assert e.op in ("add", "sub", "mul", "neg", "tanh", "sigmoid", "exp"), e.op
    check_adequacy(p, data.draw(inputs_for(p)), smallstep_too=False)
