"""The structured evaluator ([S-Cond], [S-Case], [S-While], [S-Scan]) on closed-form programs.

Each expectation is a number a person can check by hand; the ``live`` record is checked against the
structured reading of the program (an untaken branch never runs, a body op runs once per trip), and
the last section compares the evaluator with the reference interpreter on the same programs
([T2-Adequacy] values and stores, [T5-Deadness-Soundness] live firings).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from example_counts import examples
from hypothesis import given, settings
from hypothesis import strategies as st

import turnout as tn
from turnout.semantics.structured import StructuredResult, evaluate

ROOT: tuple[Any, ...] = ()


def frame_of(t: tn.Tensor) -> str:
    """The frame name of the loop whose Exit produced ``t``."""
    return t.node.inputs[0].node.attrs.get("frame_name") or t.node.inputs[0].node.inputs[0].node.attrs["frame_name"]


def loop_frames(g: tn.Graph) -> list[str]:
    return [c.frame_name for c in g.contexts if c.kind == "while"]


def names_with(r: StructuredResult, part: str) -> set[str]:
    return {n for n in r.live_nodes() if part in n}


# ---- cond and case -----------------------------------------------------------------------------------
@pytest.mark.parametrize(("x", "want"), [(3, 6), (-3, 3)])
def test_cond_runs_only_the_taken_branch(x: int, want: int) -> None:
    g = tn.Graph()
    with g.as_default():
        p = tn.placeholder(tn.int32, [], name="p")
        y = tn.cond(p > 0, lambda: tn.multiply(p, 2, name="double"), lambda: tn.negative(p, name="negate"))
    r = evaluate(g, [y], {p: x})
    assert int(r.values[0]) == want
    ran, skipped = ("double", "negate") if x > 0 else ("negate", "double")
    assert r.live_count(f"cond/true/{ran}" if x > 0 else f"cond/false/{ran}") == 1
    assert not names_with(r, skipped)
    assert r.trip_counts == {}


@pytest.mark.parametrize(("a", "b", "want"), [(True, True, 1), (True, False, 2), (False, True, 3), (False, False, 3)])
def test_nested_cond(a: bool, b: bool, want: int) -> None:
    g = tn.Graph()
    with g.as_default():
        pa = tn.placeholder(tn.bool, [], name="a")
        pb = tn.placeholder(tn.bool, [], name="b")
        y = tn.cond(pa, lambda: tn.cond(pb, lambda: tn.constant(1), lambda: tn.constant(2)), lambda: tn.constant(3))
    assert int(evaluate(g, [y], {pa: a, pb: b}).values[0]) == want


@pytest.mark.parametrize(("index", "want"), [(0, 10), (1, 20), (2, 30), (-1, 30), (9, 30)])
def test_case_selects_one_function_or_the_default(index: int, want: int) -> None:
    g = tn.Graph()
    with g.as_default():
        k = tn.placeholder(tn.int32, [], name="k")
        y = tn.case(k, [lambda: tn.constant(10, name="ten"), lambda: tn.constant(20, name="twenty")],
                    default=lambda: tn.constant(30, name="thirty"))
    r = evaluate(g, [y], {k: index})
    assert int(r.values[0]) == want
    ran = {n.rsplit("/", 1)[-1] for n in r.live_nodes()} & {"ten", "twenty", "thirty"}
    assert ran == {{10: "ten", 20: "twenty", 30: "thirty"}[want]}


def test_fetching_a_tensor_of_the_untaken_branch_is_a_dead_fetch() -> None:
    g = tn.Graph()
    with g.as_default():
        p = tn.placeholder(tn.bool, [], name="p")
        inner: list[tn.Tensor] = []

        def true_fn() -> tn.Tensor:
            inner.append(tn.constant(5) * 2)
            return inner[0]

        y = tn.cond(p, true_fn, lambda: tn.constant(0))
    assert int(evaluate(g, [inner[0]], {p: True}).values[0]) == 10
    with pytest.raises(tn.DeadFetchError, match="dead"):
        evaluate(g, [inner[0]], {p: False})
    assert int(evaluate(g, [y], {p: False}).values[0]) == 0


# ---- while_loop --------------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [0, 1, 5])
def test_while_loop_body_runs_once_per_trip_and_the_test_once_more(n: int) -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.int32, [], name="n")
        i, y = tn.while_loop(lambda i, y: tn.less(i, x, name="test"),
                             lambda i, y: (i + 1, tn.multiply(y, 2, name="twice")),
                             [tn.constant(0), tn.constant(1)])
    r = evaluate(g, [y], {x: n})
    (frame,) = loop_frames(g)
    assert int(r.values[0]) == 2**n
    assert r.trip_counts == {(frame, ROOT): n}
    (twice,) = [n.name for n in g.nodes if n.name.endswith("twice")]
    (test,) = [n.name for n in g.nodes if n.name.endswith("test")]
    assert sorted(tag for name, tag in r.live if name == twice) == [((frame, j),) for j in range(n)]
    assert r.live_count(test) == n + 1
    # every op ran at most once per tag (exactly-once), and the Exit ran at the last iteration
    assert set(r.live.values()) == {1}
    exits = [(name, tag) for name, tag in r.live if "/exit" in name]
    assert exits and all(tag == ((frame, n),) for _, tag in exits)


@pytest.mark.parametrize(("max_iter", "want"), [(0, 0), (3, 3), (100, 10)])
def test_maximum_iterations_stops_the_loop(max_iter: int, want: int) -> None:
    g = tn.Graph()
    with g.as_default():
        y = tn.while_loop(lambda i: i < 10, lambda i: i + 1, [tn.constant(0)], maximum_iterations=max_iter)[0]
    r = evaluate(g, [y])
    assert int(r.values[0]) == want
    assert list(r.trip_counts.values()) == [want]


def test_nested_loops_with_an_inner_loop_of_zero_trips() -> None:
    """for i in range(4): for j in range(2 - i): s += 1   -> s = 2 + 1 + 0 + 0 = 3."""
    g = tn.Graph()
    with g.as_default():
        def outer_body(i: tn.Tensor, acc: tn.Tensor) -> Any:
            _, s = tn.while_loop(lambda j, s: j < 2 - i, lambda j, s: (j + 1, tn.add(s, 1, name="inc")),
                                 [tn.constant(0), acc], name="inner")
            return i + 1, s

        _, acc = tn.while_loop(lambda i, a: i < 4, outer_body, [tn.constant(0), tn.constant(0)], name="outer")
    r = evaluate(g, [acc])
    outer, inner = loop_frames(g)
    assert int(r.values[0]) == 3
    assert r.trip_counts == {(outer, ROOT): 4, **{(inner, ((outer, i),)): max(2 - i, 0) for i in range(4)}}
    (inc,) = [n.name for n in g.nodes if n.name.endswith("inc")]
    assert sorted(tag for name, tag in r.live if name == inc) == [
        ((outer, 0), (inner, 0)), ((outer, 0), (inner, 1)), ((outer, 1), (inner, 0))]


def test_loop_on_an_untaken_branch_never_runs() -> None:
    g = tn.Graph()
    with g.as_default():
        p = tn.placeholder(tn.bool, [], name="p")
        y = tn.cond(p, lambda: tn.while_loop(lambda k: k < 3, lambda k: k + 1, [tn.constant(0)])[0],
                    lambda: tn.constant(-1))
    (frame,) = loop_frames(g)
    r = evaluate(g, [y], {p: False})
    assert int(r.values[0]) == -1 and r.trip_counts == {}
    assert not any(frame in str(tag) for _, tag in r.live) and not names_with(r, "while")
    r = evaluate(g, [y], {p: True})
    assert int(r.values[0]) == 3 and r.trip_counts == {(frame, ROOT): 3}


def test_cond_inside_a_loop_takes_a_branch_per_iteration() -> None:
    """Sum of the even numbers below 7, minus the odd ones: 0-1+2-3+4-5+6 = 3."""
    g = tn.Graph()
    with g.as_default():
        def body(i: tn.Tensor, s: tn.Tensor) -> Any:
            s = tn.cond(tn.equal(i % 2, 0), lambda: tn.add(s, i, name="plus"), lambda: tn.subtract(s, i, name="minus"))
            return i + 1, s

        _, s = tn.while_loop(lambda i, s: i < 7, body, [tn.constant(0), tn.constant(0)])
    r = evaluate(g, [s])
    (frame,) = loop_frames(g)
    assert int(r.values[0]) == 3
    (plus,), (minus,) = names_with(r, "plus"), names_with(r, "minus")
    assert sorted(t[0][1] for n, t in r.live if n == plus) == [0, 2, 4, 6]
    assert sorted(t[0][1] for n, t in r.live if n == minus) == [1, 3, 5]
    assert all(t[0][0] == frame for n, t in r.live if n in (plus, minus))


def test_non_termination_is_reported() -> None:
    g = tn.Graph()
    with g.as_default():
        y = tn.while_loop(lambda i: i >= 0, lambda i: i + 1, [tn.constant(0)])[0]
    with pytest.raises(tn.NonTerminationError, match="max_iterations=50"):
        evaluate(g, [y], max_iterations=50)


def test_int32_loop_wraps_around_like_numpy() -> None:
    g = tn.Graph()
    with g.as_default():
        y = tn.while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, y * 65536), [tn.constant(0), tn.constant(3)])[1]
    assert int(evaluate(g, [y]).values[0]) == int(np.int64(3 * 65536**3).astype(np.int32))


# ---- scan / map_fn / foldl / TensorArray ----------------------------------------------------------
def test_scan_map_fn_foldl() -> None:
    g = tn.Graph()
    with g.as_default():
        xs = tn.constant(np.arange(1, 6, dtype=np.float64))
        sc = tn.scan(lambda c, x: c + x, xs, tn.constant(0.0, tn.float64))
        mp = tn.map_fn(lambda x: x * x, xs)
        fl = tn.foldl(lambda c, x: c * x, xs)
        fl0 = tn.foldl(lambda c, x: c + x, xs, tn.constant(100.0, tn.float64))
    r = evaluate(g, [sc, mp, fl, fl0])
    np.testing.assert_array_equal(r.values[0], [1, 3, 6, 10, 15])
    np.testing.assert_array_equal(r.values[1], [1, 4, 9, 16, 25])
    assert float(r.values[2]) == 120.0 and float(r.values[3]) == 115.0
    # scan and map run 5 trips; foldl without initializer starts from xs[0] and runs 4
    assert sorted(r.trip_counts.values()) == [4, 5, 5, 5]


def test_tensor_array_written_in_a_loop() -> None:
    g = tn.Graph()
    with g.as_default():
        ta = tn.TensorArray(tn.int32, size=4)
        _, ta = tn.while_loop(lambda i, ta: i < 4, lambda i, ta: (i + 1, ta.write(i, i * i)), [tn.constant(0), ta])
        out = ta.stack()
        third = ta.read(3)
    r = evaluate(g, [out, third])
    np.testing.assert_array_equal(r.values[0], [0, 1, 4, 9])
    assert int(r.values[1]) == 9


# ---- Variables and control dependencies ---------------------------------------------------------
def test_variable_updated_in_a_loop_under_control_dependencies() -> None:
    """v += i for i in range(5), then read v: 0+1+2+3+4 = 10."""
    g = tn.Graph()
    with g.as_default():
        v = tn.Variable(0, name="v")

        def body(i: tn.Tensor) -> tn.Tensor:
            a = v.assign_add(i)
            with tn.control_dependencies([a]):
                return i + 1

        n = tn.while_loop(lambda i: i < 5, body, [tn.constant(0)])
        with tn.control_dependencies([n]):
            after = v.read()
    r = evaluate(g, [after])
    assert int(r.values[0]) == 10 and int(r.variables["v"]) == 10
    assert sum(1 for name, _ in r.live if name.endswith("AssignAddVariable")) == 5
    # the store given is the start, and it is not modified
    start = {"v": np.asarray(100, np.int32)}
    r = evaluate(g, [after], variables=start)
    assert int(r.values[0]) == 110 and int(start["v"]) == 100


def test_assign_on_untaken_branch_has_no_effect() -> None:
    g = tn.Graph()
    with g.as_default():
        v = tn.Variable(1, name="v")
        p = tn.placeholder(tn.bool, [], name="p")
        y = tn.cond(p, lambda: v.assign(7), lambda: tn.constant(0))
        with tn.control_dependencies([y]):
            after = v.read()
    assert [int(x) for x in evaluate(g, [y, after], {p: True}).values] == [7, 7]
    assert [int(x) for x in evaluate(g, [y, after], {p: False}).values] == [0, 1]


def test_group_of_effects_runs_them() -> None:
    g = tn.Graph()
    with g.as_default():
        v = tn.Variable(0, name="v")
        w = tn.Variable(0, name="w")
        grp = tn.group(v.assign(3), w.assign(4))
        with tn.control_dependencies([grp]):
            s = v.read() + w.read()
    r = evaluate(g, [s])
    assert int(r.values[0]) == 7 and {k: int(x) for k, x in r.variables.items()} == {"v": 3, "w": 4}


def test_gradient_stacks_are_keyed_by_index() -> None:
    g = tn.Graph()
    with g.as_default():
        h = g.create_node("StackNew", (), {"dtype": "int32", "shape": []}).outputs[0]

        def body(i: tn.Tensor) -> tn.Tensor:
            idx = tn.reshape(i, [1])
            pushed = g.create_node("StackPush", [h, idx, i * 10]).outputs[0]
            with tn.control_dependencies([pushed]):
                return i + 1

        n = tn.while_loop(lambda i: i < 3, body, [tn.constant(0)])
        with tn.control_dependencies([n]):
            popped = g.create_node("StackPop", [h, tn.constant([1])], {"dtype": "int32", "shape": []}).outputs[0]
    r = evaluate(g, [popped])
    assert int(r.values[0]) == 10
    (stack,) = r.stacks.values()
    assert {k: int(v) for k, v in stack.items()} == {(0,): 0, (1,): 10, (2,): 20}


# ---- errors ------------------------------------------------------------------------------------------
def test_errors() -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.int32, [], name="x")
        y = tn.while_loop(lambda i: i < x, lambda i: i + 1, [tn.constant(0)])[0]
        z = x // 0
    with pytest.raises(tn.FeedError, match="must be fed"):
        evaluate(g, [y])
    with pytest.raises(tn.KernelError, match="division by zero"):
        evaluate(g, [z], {x: 1})
    body_node = next(n for n in g.nodes if n.context is not None and n.op == "Add")
    with pytest.raises(tn.ValidationError, match="W-Fetch-Root"):
        evaluate(g, [body_node.outputs[0]], {x: 1})


def test_hand_built_control_flow_is_refused() -> None:
    g = tn.Graph()
    with g.as_default():
        p = tn.placeholder(tn.bool, [], name="p")
        f, t = tn.raw.switch(tn.constant(1), p)
        m, _ = tn.raw.merge([f, t])
    with pytest.raises(tn.UnsupportedError, match="Switch"):
        evaluate(g, [m], {p: True})


# ---- agreement with the reference interpreter ([T2-Adequacy], [T5-Deadness-Soundness]) ----------
def _reference(g: tn.Graph, fetches: list[tn.Tensor], feeds: dict[Any, Any]) -> tuple[list[Any], set[Any], Any]:
    sess = tn.Session(g)
    values = sess.run(fetches, feeds, trace=True)
    trace = sess.last_result.trace
    live = {(n, t) for n, t in trace.live_firings() if "#" not in n}  # '#' marks frame bookkeeping
    return values, live, sess.variables


def _programs() -> list[tuple[str, Any]]:
    def nested() -> Any:
        g = tn.Graph()
        with g.as_default():
            def outer_body(i: tn.Tensor, acc: tn.Tensor) -> Any:
                _, s = tn.while_loop(lambda j, s: j < 2 - i, lambda j, s: (j + 1, s + i), [tn.constant(0), acc])
                return i + 1, s

            _, acc = tn.while_loop(lambda i, a: i < 4, outer_body, [tn.constant(0), tn.constant(5)])
        return g, [acc], {}

    def cond_loop() -> Any:
        g = tn.Graph()
        with g.as_default():
            p = tn.placeholder(tn.bool, [], name="p")
            x = tn.placeholder(tn.int32, [], name="x")
            y = tn.cond(p, lambda: tn.while_loop(lambda k: k < x, lambda k: k + 2, [tn.constant(0)])[0],
                        lambda: x * 3)
        return g, [y], {p: False, x: 5}

    def variables() -> Any:
        g = tn.Graph()
        with g.as_default():
            v = tn.Variable(2, name="v")

            def body(i: tn.Tensor) -> tn.Tensor:
                with tn.control_dependencies([i]):  # an assign ordered by a control edge on i
                    a = v.assign(v.read() * 2)
                with tn.control_dependencies([a]):
                    return i + 1

            n = tn.while_loop(lambda i: i < 4, body, [tn.constant(0)])
            with tn.control_dependencies([n]):
                after = v.read()
        return g, [after], {}

    def functional() -> Any:
        g = tn.Graph()
        with g.as_default():
            xs = tn.constant(np.arange(4, dtype=np.float32))
            k = tn.placeholder(tn.int32, [], name="k")
            sc = tn.scan(lambda c, x: c + x, xs, tn.constant(1.0))
            cs = tn.case(k, [lambda: tn.reduce_sum(sc), lambda: tn.constant(-1.0)])
        return g, [sc, cs], {k: 0}

    return [("nested", nested), ("cond_loop", cond_loop), ("variables", variables), ("functional", functional)]


@pytest.mark.parametrize(("name", "make"), _programs(), ids=[n for n, _ in _programs()])
def test_agrees_with_the_reference_interpreter(name: str, make: Any) -> None:
    g, fetches, feeds = make()
    r = evaluate(g, fetches, feeds)
    values, live, store = _reference(g, fetches, feeds)
    for a, b in zip(r.values, values, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert set(r.live) == live
    assert {k: v.tolist() for k, v in r.variables.items()} == {k: v.tolist() for k, v in store.items()}


def test_body_op_with_only_invariant_inputs_runs_once_per_trip() -> None:
    """Regression: the lowering once gave an op reading only loop invariants (Enter is_constant) no
    control dependency on the body pivot, so the dataflow ran it again at the exit iteration."""
    g = tn.Graph()
    with g.as_default():
        v = tn.Variable(0, name="v")
        c = tn.constant(7)

        def body(i: tn.Tensor) -> tn.Tensor:
            a = v.assign_add(c)  # reads only invariants: the handle and c
            with tn.control_dependencies([a]):
                return i + 1

        n = tn.while_loop(lambda i: i < 3, body, [tn.constant(0)])
        with tn.control_dependencies([n]):
            after = v.read()
    r = evaluate(g, [after])
    assert int(r.values[0]) == 21  # the structured meaning: 3 trips of v += 7
    values, live, _ = _reference(g, [after], {})
    assert int(values[0]) == 21 and set(r.live) == live


# ---- generated programs: the evaluator against the AST interpreter and the reference ------------------
@settings(max_examples=examples(30))
@given(st.data())
def test_generated_programs_agree_with_the_ast_interpreter_and_the_reference(data: st.DataObject) -> None:
    """Values and loop trip counts equal those of ``tests/programs.interpret`` (a direct Python reading
    of the AST that owes nothing to the graph); values and the set of live firings equal the reference
    interpreter's ([T2-Adequacy], [T5-Deadness-Soundness])."""
    import programs
    import strategies

    p = data.draw(strategies.programs(loops=True, conds=True, max_depth=3))
    built = programs.build(p)
    inputs = data.draw(strategies.inputs_for(p))
    feeds = built.feed_dict(inputs)
    r = evaluate(built.graph, built.fetches, feeds)
    want = programs.interpret(p, inputs)
    programs.assert_values_equal(r.values, want.values, "structured vs AST")
    for loop_id, ctx in built.loops.items():
        got = sorted(v for (frame, _), v in r.trip_counts.items() if frame == ctx.frame_name)
        if got:  # a loop whose results nothing fetched is pruned, as in the dataflow interpreters
            assert got == sorted(want.trips.get(loop_id, [])), f"trip counts of {loop_id}"
    values, live, _ = _reference(built.graph, built.fetches, feeds)
    programs.assert_values_equal(r.values, values, "structured vs reference")
    assert set(r.live) == live, "[T5-Deadness-Soundness]: the ops that ran live differ"


def test_an_outer_invariant_enters_a_nested_loop_only_in_iterations_that_ran() -> None:
    """Regression (found by the ``dev`` campaign of the generated-programs test above): a nested loop
    whose body reads an invariant of the enclosing loop (``x``) entered it through a constant Enter
    with no control input, so in the enclosing loop's exit iteration, whose body never runs, that
    Enter fired live in the reference interpreter while the structured meaning runs no body there
    ([T5-Deadness-Soundness]). It now waits on the enclosing loop's pivot, as the nested loop's
    variables' Enters do, and the two agree on every live firing."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.int32, [], name="x")

        def outer(i: tn.Tensor, s: tn.Tensor) -> list[tn.Tensor]:
            (t,) = tn.while_loop(lambda t: t < 0, lambda t: [x], [tn.constant(0)], name="inner")
            return [i + 1, s + t]

        _, total = tn.while_loop(lambda i, s: i < 1, outer, [tn.constant(0), tn.constant(0)], name="outer")
    inner_enters = [n for n in g.nodes if n.op == "Enter" and n.attrs["is_constant"]
                    and n.inputs[0].node.op == "Enter"]
    assert inner_enters and all(n.control_inputs for n in inner_enters)
    r = evaluate(g, [total], {x: 3})
    values, live, _ = _reference(g, [total], {x: 3})
    assert int(r.values[0]) == int(values[0]) == 0
    assert set(r.live) == live
