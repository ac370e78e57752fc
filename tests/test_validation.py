"""Validation (``turnout.validate``): each well-formedness rule of specs/semantics.rst rejects a graph
that breaks it, before it runs, with the rule's name and a message naming the node (and the user's
source line that created it). Builder-made graphs validate cleanly.

Every bad graph here is built by hand (``tn.raw`` or ``Graph.create_node``) with exactly one defect,
next to the well-formed counting loop it was derived from.
"""

from __future__ import annotations

import gc
import importlib
import weakref
from typing import Any

import numpy as np
import pytest

import turnout as tn
from turnout import raw
from turnout.errors import ValidationError
from turnout.graph import TensorSpec
from turnout.validate import validate

# The module, not the function that ``tn.validate`` (and so ``from turnout import validate``) names.
validate_mod = importlib.import_module("turnout.validate")

SRC = "test_validation.py"


def counting_loop(limit: int = 3) -> dict[str, Any]:
    """``i = 0; while i < limit: i += 1``, by hand, as the paper's Figure 4 lowering."""
    g = tn.Graph()
    with g.as_default():
        zero = tn.constant(0, name="zero")
        lim = raw.enter(tn.constant(limit, name="limit"), "F", is_constant=True, name="limit_in")
        one = raw.enter(tn.constant(1, name="one"), "F", is_constant=True, name="one_in")
        e = raw.enter(zero, "F", name="enter")
        m, _ = raw.merge([e, raw.BACK_EDGE], name="merge")
        p = raw.loop_cond(tn.less(m, lim, name="less"), name="loop_cond")
        f, t = raw.switch(m, p, name="switch")
        body = tn.add(t, one, name="body")
        nxt = raw.next_iteration(body, name="next")
        raw.close_back_edge(m, nxt)
        out = raw.exit(f, name="exit")
    return {"g": g, "zero": zero, "enter": e, "merge": m, "pred": p, "f": f, "t": t, "body": body,
            "next": nxt, "exit": out, "one": one, "limit": lim}


def expect(rule: str, node_name: str, fn: Any, *args: Any, **kw: Any) -> ValidationError:
    with pytest.raises(ValidationError) as info:
        fn(*args, **kw)
    err = info.value
    assert err.rule == rule, str(err)
    assert f"[{rule}]" in str(err)
    assert f'"{node_name}"' in str(err), f"message does not name {node_name}: {err}"
    assert err.node is not None and err.node.name == node_name
    return err


# ---- well-formed graphs --------------------------------------------------------------------------
def test_hand_built_loop_is_well_formed_and_runs() -> None:
    n = counting_loop(3)
    fa = validate(n["g"], [n["exit"]])
    assert fa.node_frame[n["body"].node.id] == ("F",)
    assert fa.node_frame[n["exit"].node.id] == ()
    assert int(tn.Session(n["g"]).run(n["exit"])) == 3


def build_nested() -> tuple[tn.Graph, list[tn.Tensor], tn.Tensor]:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")

        def outer_body(i: Any, y: Any) -> Any:
            def inner_body(j: Any, z: Any) -> Any:
                return j + 1, tn.cond(z > 5.0, lambda: z * 2.0, lambda: z + 1.0)

            _, z = tn.while_loop(lambda j, z: j < 2, inner_body, [tn.constant(0), y])
            return i + 1, z

        _, y = tn.while_loop(lambda i, y: i < 3, outer_body, [tn.constant(0), x], parallel_iterations=4)
        ta = tn.TensorArray(tn.float32, size=3)
        _, ta = tn.while_loop(lambda k, ta: k < 3, lambda k, ta: (k + 1, ta.write(k, tn.cast(k, tn.float32) * x)),
                              [tn.constant(0), ta])
        s = ta.stack()
        v = tn.Variable(np.ones(3, np.float32), name="v")
        r = tn.reduce_sum(v.read() + s)
        q = tn.scan(lambda a, e: a + e, tn.constant(np.arange(6.0, dtype=np.float32).reshape(3, 2)))
        c = tn.case(tn.constant(1), [lambda: x, lambda: x * 3.0, lambda: -x])
    return g, [y, r, q, c], x


def test_builder_graphs_validate_cleanly() -> None:
    g, fetches, x = build_nested()
    fa = validate(g, fetches, feeds=[x])
    nested = [f for f in fa.frames if len(f) == 2]
    assert len(nested) == 1 and fa.frames[nested[0][:1]].parallel_iterations == 4
    y, r, q, c = tn.Session(g).run(fetches, {x: 1.0})
    # z: 1 -> 2 -> 3 (inner, z <= 5 adds 1) ; 3 -> 4 -> 5 ; 5 -> 6 -> 12
    assert float(y) == 12.0
    assert float(r) == 3.0 + (0.0 + 1.0 + 2.0)
    np.testing.assert_array_equal(q, [[0, 1], [2, 4], [6, 9]])
    assert float(c) == 3.0


# ---- [W-Merge-Bound] -------------------------------------------------------------------------------
def test_unbound_back_edge() -> None:
    g = tn.Graph()
    with g.as_default():
        e = raw.enter(tn.constant(0), "F")
        m, _ = raw.merge([e, raw.BACK_EDGE], name="open_merge")
        f, t = raw.switch(m, raw.loop_cond(tn.less(m, raw.enter(tn.constant(3), "F", is_constant=True))))
        raw.next_iteration(t)  # never bound
        out = raw.exit(f)
    err = expect("W-Merge-Bound", "open_merge", validate, g, [out])
    assert "unbound back edge" in str(err) and SRC in str(err)


def test_loop_merge_without_entry() -> None:
    g = tn.Graph()
    with g.as_default():
        e = raw.enter(tn.constant(0), "F")
        first = raw.next_iteration(e)
        m, _ = raw.merge([first, raw.BACK_EDGE], name="no_entry")
        raw.close_back_edge(m, raw.next_iteration(m))
    err = expect("W-Merge-Bound", "no_entry", validate, g)
    assert "entry" in str(err)


def test_loop_merge_entry_from_constant_enter() -> None:
    g = tn.Graph()
    with g.as_default():
        e = raw.enter(tn.constant(0), "F", is_constant=True)
        m, _ = raw.merge([e, raw.BACK_EDGE], name="const_entry")
        raw.close_back_edge(m, raw.next_iteration(tn.identity(m)))
    err = expect("W-Merge-Bound", "const_entry", validate, g)
    assert "non-constant Enter" in str(err)


def test_loop_merge_entry_from_ordinary_op() -> None:
    g = tn.Graph()
    with g.as_default():
        e = raw.enter(tn.constant(0), "F")
        m, _ = raw.merge([tn.identity(e, name="not_an_enter"), raw.BACK_EDGE], name="odd_entry")
        raw.close_back_edge(m, raw.next_iteration(tn.identity(m)))
    err = expect("W-Merge-Bound", "odd_entry", validate, g)
    assert "not_an_enter" in str(err)


# ---- [W-Next-In-Frame] -----------------------------------------------------------------------------
def test_next_iteration_feeding_an_ordinary_op() -> None:
    n = counting_loop()
    g = n["g"]
    with g.as_default():
        tn.multiply(n["next"], 2, name="reads_next")
    err = expect("W-Next-In-Frame", "reads_next", validate, g)
    assert 'NextIteration node "next"' in str(err)


def test_next_iteration_in_root_frame() -> None:
    g = tn.Graph()
    with g.as_default():
        raw.next_iteration(tn.constant(1), name="root_next")
    expect("W-Next-In-Frame", "root_next", validate, g)


def test_loop_cond_outside_any_frame() -> None:
    g = tn.Graph()
    with g.as_default():
        p = raw.loop_cond(tn.constant(True), name="stray_pivot")
        f, _ = raw.switch(tn.constant(1.0), p)
    err = expect("W-Next-In-Frame", "stray_pivot", validate, g, [f])
    assert "root frame" in str(err)


# ---- frames: [W-Frame-Consistent], [W-Exit-In-Frame], [W-Cycle-Through-Next], [W-Frame-Name] ----
def test_inputs_from_different_frames() -> None:
    n = counting_loop()
    with n["g"].as_default():
        tn.add(n["t"], n["zero"], name="mixed")
    expect("W-Frame-Consistent", "mixed", validate, n["g"])


def test_exit_outside_frame() -> None:
    g = tn.Graph()
    with g.as_default():
        raw.exit(tn.constant(1.0), name="lost_exit")
    expect("W-Exit-In-Frame", "lost_exit", validate, g)


def test_cycle_without_next_iteration() -> None:
    g = tn.Graph()
    with g.as_default():
        e = raw.enter(tn.constant(0), "F")
        m, _ = raw.merge([e, raw.BACK_EDGE], name="cyc_merge")
        back = tn.add(m, raw.enter(tn.constant(1), "F", is_constant=True), name="skips_next")
        m.node._inputs[1] = back  # only reachable by editing a node: close_back_edge would accept it too
    with pytest.raises(ValidationError) as info:
        validate(g)
    assert info.value.rule == "W-Cycle-Through-Next"
    assert info.value.node.name in ("cyc_merge", "skips_next") and info.value.node.name in str(info.value)


def test_enters_of_one_frame_disagree_on_parallel_iterations() -> None:
    g = tn.Graph()
    with g.as_default():
        a = raw.enter(tn.constant(0), "F", parallel_iterations=4, name="pi_4")
        b = raw.enter(tn.constant(1), "F", parallel_iterations=8, name="pi_8")
        tn.add(a, b)
    with pytest.raises(ValidationError) as info:
        validate(g)
    err = info.value
    assert err.rule == "W-Frame-Name" and "parallel_iterations=" in str(err)
    # whichever of the two Enters the topological order reaches second is the one named
    assert err.node.name in ("pi_4", "pi_8") and f'"{err.node.name}"' in str(err)


@pytest.mark.parametrize("attrs,what", [
    ({"frame_name": "", "is_constant": False, "parallel_iterations": 10}, "frame_name"),
    ({"frame_name": "F", "is_constant": False, "parallel_iterations": 0}, "parallel_iterations"),
    ({"frame_name": "F", "is_constant": "yes", "parallel_iterations": 10}, "is_constant"),
])
def test_enter_attrs_are_checked(attrs: dict[str, Any], what: str) -> None:
    g = tn.Graph()
    with g.as_default():
        g.create_node("Enter", [tn.constant(0)], attrs, name="bad_enter")
    err = expect("W-Frame-Name", "bad_enter", validate, g)
    assert what in str(err)


def test_back_edge_into_another_frame() -> None:
    n = counting_loop()
    g = n["g"]
    with g.as_default():
        inner = raw.enter(n["t"], "G")
        m2, _ = raw.merge([raw.enter(n["t"], "G2"), raw.BACK_EDGE], name="outer_merge")
        raw.close_back_edge(m2, raw.next_iteration(inner, name="wrong_frame_next"))
    expect("W-Frame-Name", "outer_merge", validate, g)


# ---- [W-Types] ----------------------------------------------------------------------------------------
def test_merge_with_mixed_dtypes() -> None:
    g = tn.Graph()
    with g.as_default():
        a = tn.placeholder(tn.int32, [], name="a")
        b = tn.placeholder(tn.float64, [], name="b")
        m = g.create_node("Merge", [a, b], name="mixed_merge",
                          specs=[TensorSpec(tn.int32, ()), TensorSpec(tn.int32, ())])
    err = expect("W-Types", "mixed_merge", validate, g, [m.outputs[0]])
    assert "a:0: int32" in str(err) and "b:0: float64" in str(err) and "share one dtype" in str(err)


def test_switch_predicate_must_be_bool() -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.constant(1.0)
        spec = x.spec
        g.create_node("Switch", [x, tn.constant(1.0)], name="float_pred", specs=[spec, spec])
    err = expect("W-Types", "float_pred", validate, g)
    assert "predicate must be bool" in str(err)


def test_switch_predicate_must_be_scalar() -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.constant(1.0)
        g.create_node("Switch", [x, tn.constant([True, False])], name="vector_pred", specs=[x.spec, x.spec])
    err = expect("W-Types", "vector_pred", validate, g)
    assert "scalar" in str(err)


def test_recorded_output_spec_must_match_inference() -> None:
    g = tn.Graph()
    with g.as_default():
        a = tn.constant([1.0, 2.0])
        g.create_node("Add", [a, a], name="lying_add", specs=[TensorSpec(tn.float32, (3,))])
    err = expect("W-Types", "lying_add", validate, g)
    assert "float32[3]" in str(err) and "float32[2]" in str(err)


def test_recorded_dtype_must_match_but_a_more_precise_shape_is_fine() -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, None, name="anything")
        precise = g.create_node("Identity", [x], name="known_to_be_3", specs=[TensorSpec(tn.float32, (3,))])
        validate(g, [precise.outputs[0]])  # [3] fits <unknown>: the creator knew more than the shape rule
        g.create_node("Identity", [x], name="claims_int", specs=[TensorSpec(tn.int32, (3,))])
    err = expect("W-Types", "claims_int", validate, g)
    assert "recorded as int32[3]" in str(err) and "give float32<unknown>" in str(err)


def test_stack_index_must_be_int32_vector() -> None:
    g = tn.Graph()
    with g.as_default():
        h = g.create_node("StackNew", [], {"elem_dtype": "float32", "elem_shape": []}, name="stack").outputs[0]
        g.create_node("StackPush", [h, tn.constant(0), tn.constant(1.0)], name="scalar_index_push")
    err = expect("W-Types", "scalar_index_push", validate, g)
    assert "int32 vector" in str(err)


# ---- [W-Fetch-Root] ---------------------------------------------------------------------------------
def test_fetch_inside_loop_body() -> None:
    n = counting_loop()
    err = expect("W-Fetch-Root", "body", validate, n["g"], [n["body"]])
    assert "'F'" in str(err) and "Exit" in str(err)


def test_fetch_inside_builder_loop_rejected_by_session() -> None:
    g = tn.Graph()
    with g.as_default():
        inside: list[tn.Tensor] = []

        def body(i: Any) -> Any:
            inside.append(i * 2)
            return i + 1

        tn.while_loop(lambda i: i < 3, body, [tn.constant(0)])
    with pytest.raises(ValidationError) as info:
        tn.Session(g).run(inside[0])
    assert info.value.rule == "W-Fetch-Root" and inside[0].node.name in str(info.value)


def test_fetch_and_feed_of_another_graph() -> None:
    n, other = counting_loop(), counting_loop()
    expect("W-Fetch-Root", "exit", validate, n["g"], [other["exit"]])
    err = expect("W-Fetch-Root", "zero", validate, n["g"], [n["exit"]], feeds=[other["zero"]])
    assert "feed" in str(err)


# ---- caching ----------------------------------------------------------------------------------------
def test_validation_is_cached_per_graph_version(monkeypatch: pytest.MonkeyPatch) -> None:
    n = counting_loop()
    calls = []
    real = validate_mod._validate_graph
    monkeypatch.setattr(validate_mod, "_validate_graph", lambda g: calls.append(g) or real(g))
    sess = tn.Session(n["g"])
    assert [int(sess.run(n["exit"])) for _ in range(3)] == [3, 3, 3]
    assert len(calls) == 1
    first = validate(n["g"])
    with n["g"].as_default():
        tn.constant(5.0)  # the graph changes: its version moves on, the cached result no longer applies
    assert validate(n["g"]) is not first and len(calls) == 2


def test_cached_results_do_not_keep_graphs_alive() -> None:
    n = counting_loop()
    validate(n["g"], [n["exit"]])
    ref = weakref.ref(n["g"])
    del n
    gc.collect()
    assert ref() is None


def test_tn_validate_stays_the_function_after_a_run() -> None:
    n = counting_loop()
    tn.Session(n["g"]).run(n["exit"])  # the reference interpreter imports turnout.validate
    assert tn.validate is validate and callable(tn.validate)


def test_a_stack_op_on_a_variable_handle_and_a_variable_op_on_a_stack_are_refused() -> None:
    """[W-Types]: stack and Variable handles are both ``resource`` tensors, so the validator traces a
    handle to what made it (through Enter, Switch, Merge...): a StackPush on a Variable's handle (which
    the reference interpreter met as a bare ``KeyError`` and the small-step system ran), or a Variable
    read of a stack, is refused naming the node and the handle's maker."""
    g = tn.Graph()
    with g.as_default():
        v = tn.Variable(np.zeros(2, np.float32), name="v")
        inside = tn.raw.enter(v.handle, "f", is_constant=True)
        g.create_node("StackPush", [inside, tn.raw.enter(tn.constant(np.array([0], np.int32)), "f", is_constant=True),
                                    tn.raw.enter(tn.constant(1.0), "f", is_constant=True)], name="push_on_var")
    err = expect("W-Types", "push_on_var", validate, g)
    assert "a Variable's handle" in str(err) and "needs a stack's" in str(err)
    g2 = tn.Graph()
    with g2.as_default():
        s = g2.create_node("StackNew", [], {"elem_dtype": "float32", "elem_shape": []}, name="stack").outputs[0]
        g2.create_node("ReadVariable", [s], {"dtype": "float32", "shape": [2]}, name="read_a_stack")
    err = expect("W-Types", "read_a_stack", validate, g2)
    assert "a stack's handle" in str(err) and "needs a Variable's" in str(err)
