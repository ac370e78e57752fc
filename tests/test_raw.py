"""The paper's primitives used directly (``tn.raw``): Switch/Merge, dead values, hand-built loops.

These graphs are built exactly as in the paper's figures, with no builder in between, so what runs is
what is written here. Expected values follow from the definitions in docs/design.rst, "The model".
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import turnout as tn
from turnout import raw

#: tests of reference-only machinery, or of graphs the fast backend rejects by design (UnsupportedError)
REFERENCE_ONLY = pytest.mark.parametrize("backend", ["reference"])


def run(backend: str, g: tn.Graph, fetches: Any, feed: dict[Any, Any] | None = None) -> Any:
    return tn.Session(g, backend=backend).run(fetches, feed_dict=feed)


def switch_merge(pred: bool) -> tuple[tn.Graph, dict[str, Any]]:
    """x=3: Merge(Switch(x, p)[0] - 1, Switch(x, p)[1] * 10), the paper's Figure-style conditional."""
    g = tn.Graph()
    with g.as_default():
        p = tn.placeholder(tn.bool, [], name="p")
        x = tn.constant(3.0, name="x")
        f, t = raw.switch(x, p)
        out_f = tn.subtract(f, 1.0, name="false_branch")
        out_t = tn.multiply(t, 10.0, name="true_branch")
        m, idx = raw.merge([out_f, out_t])
    return g, {"p": p, "f": f, "t": t, "out_f": out_f, "out_t": out_t, "m": m, "idx": idx}


@pytest.mark.parametrize("pred,value,index", [(True, 30.0, 1), (False, 2.0, 0)])
def test_switch_merge_takes_one_branch(backend: str, pred: bool, value: float, index: int) -> None:
    g, n = switch_merge(pred)
    m, idx = run(backend, g, [n["m"], n["idx"]], {n["p"]: pred})
    assert float(m) == value
    assert int(idx) == index  # Merge's value_index names the live input


@pytest.mark.parametrize("pred,dead", [(True, ["f", "out_f"]), (False, ["t", "out_t"])])
def test_fetching_the_untaken_branch_is_a_dead_fetch(backend: str, pred: bool, dead: list[str]) -> None:
    g, n = switch_merge(pred)
    for name in dead:
        with pytest.raises(tn.DeadFetchError):
            run(backend, g, n[name], {n["p"]: pred})
    live = "out_t" if pred else "out_f"
    assert float(run(backend, g, n[live], {n["p"]: pred})) == (30.0 if pred else 2.0)


def test_switch_shapes_and_merge_index_dtype() -> None:
    g, n = switch_merge(True)
    assert n["f"].dtype == tn.float32 and n["f"].shape == ()
    assert n["idx"].dtype == tn.int32 and n["idx"].shape == ()
    with g.as_default(), pytest.raises(tn.DTypeError, match="Switch"):
        raw.switch(tn.constant(1.0), tn.constant(1))
    with g.as_default(), pytest.raises(tn.ShapeError, match="Switch"):
        raw.switch(tn.constant(1.0), tn.constant([True, False]))
    with g.as_default(), pytest.raises(tn.DTypeError, match="Merge"):
        raw.merge([tn.constant(1.0), tn.constant(1)])


def test_dead_value_propagates_through_ordinary_ops(backend: str) -> None:
    """An op with a dead input does not run its kernel: a division by zero on the dead side is harmless."""
    g = tn.Graph()
    with g.as_default():
        p = tn.placeholder(tn.bool, [])
        x = tn.constant(4)
        f, t = raw.switch(x, p)
        risky = t // 0  # integer division by zero: a KernelError if it ever ran
        safe = f + 1
        m, idx = raw.merge([safe, risky])
    assert int(run(backend, g, m, {p: False})) == 5
    with pytest.raises(tn.KernelError, match="division by zero"):
        run(backend, g, m, {p: True})


def test_merge_of_two_dead_inputs_is_dead(backend: str) -> None:
    g = tn.Graph()
    with g.as_default():
        p = tn.placeholder(tn.bool, [])
        q = tn.placeholder(tn.bool, [])
        f, t = raw.switch(tn.constant(1.0), p)
        f2, t2 = raw.switch(f, q)  # live only when p is false
        m, _ = raw.merge([t, t2])  # dead when p is false and q is false
    assert float(run(backend, g, m, {p: True, q: False})) == 1.0
    assert float(run(backend, g, m, {p: False, q: True})) == 1.0
    with pytest.raises(tn.DeadFetchError):
        run(backend, g, m, {p: False, q: False})


def counting_loop(limit: int, frame: str = "count") -> tuple[tn.Graph, dict[str, Any]]:
    """i = 0; while i < limit: i = i + 1  — from raw primitives, closing the back edge by hand."""
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")
        e = raw.enter(tn.constant(0), frame, name="enter_i")
        n_in = raw.enter(n, frame, is_constant=True, name="enter_n")
        m, idx = raw.merge([e, raw.BACK_EDGE], name="merge_i")
        p = raw.loop_cond(tn.less(m, n_in), name="loop_cond")
        f, t = raw.switch(m, p, name="switch_i")
        one = raw.enter(tn.constant(1), frame, is_constant=True, name="enter_one")
        nxt = raw.next_iteration(tn.add(t, one, name="body"), name="next_i")
        raw.close_back_edge(m, nxt)
        y = raw.exit(f, name="exit_i")
    return g, {"n": n, "y": y, "m": m, "idx": idx, "e": e, "nxt": nxt}


@pytest.mark.parametrize("limit", [0, 1, 5])
def test_hand_built_loop(backend: str, limit: int) -> None:
    g, n = counting_loop(limit)
    assert int(run(backend, g, n["y"], {n["n"]: limit})) == limit


def test_hand_built_loop_structure() -> None:
    g, n = counting_loop(3)
    merge = n["m"].node
    assert merge.inputs == (n["e"], n["nxt"])
    assert not merge.has_pending_back_edge
    frames = tn.static_frames(g)
    assert frames.node_frame[merge.id] == ("count",)
    assert frames.node_frame[n["y"].node.id] == ()
    assert frames.frames[("count",)].parallel_iterations == 10


def test_back_edge_rules() -> None:
    g = tn.Graph()
    with g.as_default():
        m, _ = raw.merge([raw.enter(tn.constant(0), "f"), raw.BACK_EDGE])
        with pytest.raises(tn.GraphBuildError, match="unbound back edge"):
            _ = m.node.inputs
        with pytest.raises(tn.DTypeError):
            raw.close_back_edge(m, raw.next_iteration(tn.constant(1.0)))
        raw.close_back_edge(m, raw.next_iteration(m + 1))
        with pytest.raises(tn.GraphBuildError, match="no pending back edge"):
            raw.close_back_edge(m, raw.next_iteration(m + 2))
        with pytest.raises(tn.GraphBuildError, match="Merge"):
            raw.close_back_edge(tn.constant(1), tn.constant(2))


def test_value_index_in_a_loop_tells_entry_from_back_edge(backend: str) -> None:
    """Merge's value_index is 0 on iteration 0 (from Enter), 1 afterwards (from NextIteration).
    Summing it over a loop that runs k times counts the k back-edge arrivals."""
    g = tn.Graph()
    with g.as_default():
        fr = "vi"
        mi, vi = raw.merge([raw.enter(tn.constant(0), fr), raw.BACK_EDGE])
        ms, _ = raw.merge([raw.enter(tn.constant(0), fr), raw.BACK_EDGE])
        p = raw.loop_cond(mi < raw.enter(tn.constant(4), fr, is_constant=True))
        fi, ti = raw.switch(mi, p)
        fs, ts = raw.switch(ms + vi, p)
        raw.close_back_edge(mi, raw.next_iteration(ti + raw.enter(tn.constant(1), fr, is_constant=True)))
        raw.close_back_edge(ms, raw.next_iteration(ts))
        total = raw.exit(fs)
    # iterations 0..4 see value_index 0,1,1,1,1 -> 4
    assert int(run(backend, g, total)) == 4


def test_enter_of_two_frames_into_one_op_is_rejected(backend: str) -> None:
    g = tn.Graph()
    with g.as_default():
        a = raw.enter(tn.constant(1.0), "frame_a")
        b = raw.enter(tn.constant(2.0), "frame_b")
        c = a + b
    with pytest.raises(tn.ValidationError, match="different frames") as ei:
        tn.static_frames(g)
    assert ei.value.rule == "W-Frame-Consistent"
    assert ei.value.node is c.node
    with pytest.raises(tn.ValidationError, match="W-Frame-Consistent"):
        run(backend, g, c)


def test_root_constant_inside_a_hand_built_loop_is_rejected() -> None:
    """Raw graphs get no capture: a constant used in a loop body must be entered (is_constant=True)."""
    g = tn.Graph()
    with g.as_default():
        m, _ = raw.merge([raw.enter(tn.constant(0), "f"), raw.BACK_EDGE])
        body = m + 1  # `1` is a Const in the root frame
    with pytest.raises(tn.ValidationError, match="different frames") as ei:
        tn.static_frames(g)
    assert ei.value.node is body.node


def test_exit_outside_any_frame_is_rejected() -> None:
    g = tn.Graph()
    with g.as_default():
        raw.exit(tn.constant(1.0))
    with pytest.raises(tn.ValidationError) as ei:
        tn.static_frames(g)
    assert ei.value.rule == "W-Exit-In-Frame"


def test_nested_hand_built_loops(backend: str) -> None:
    """for i in range(3): for j in range(i): s += 1   ->  s = 0 + 1 + 2 = 3."""
    g = tn.Graph()
    with g.as_default():
        zero = tn.constant(0)
        one_o = raw.enter(tn.constant(1), "outer", is_constant=True)
        i_m, _ = raw.merge([raw.enter(zero, "outer"), raw.BACK_EDGE])
        s_m, _ = raw.merge([raw.enter(zero, "outer"), raw.BACK_EDGE])
        p = raw.loop_cond(i_m < raw.enter(tn.constant(3), "outer", is_constant=True))
        i_f, i_t = raw.switch(i_m, p)
        s_f, s_t = raw.switch(s_m, p)
        # inner loop: j from 0 to i, s += 1
        one_i = raw.enter(one_o, "inner", is_constant=True)
        j_m, _ = raw.merge([raw.enter(i_t - i_t, "inner"), raw.BACK_EDGE])
        t_m, _ = raw.merge([raw.enter(s_t, "inner"), raw.BACK_EDGE])
        q = raw.loop_cond(j_m < raw.enter(i_t, "inner", is_constant=True))
        j_f, j_t = raw.switch(j_m, q)
        t_f, t_t = raw.switch(t_m, q)
        raw.close_back_edge(j_m, raw.next_iteration(j_t + one_i))
        raw.close_back_edge(t_m, raw.next_iteration(t_t + one_i))
        s_after = raw.exit(t_f)
        raw.exit(j_f)
        raw.close_back_edge(i_m, raw.next_iteration(i_t + one_o))
        raw.close_back_edge(s_m, raw.next_iteration(s_after))
        s = raw.exit(s_f)
    assert int(run(backend, g, s)) == 3


def test_loop_with_dead_entry_is_dead(backend: str) -> None:
    """A hand-built loop whose Enter receives a dead value (it sits on the untaken side of a Switch):
    the loop dies at once and its Exit is dead, and a Merge after it takes the live side."""
    g = tn.Graph()
    with g.as_default():
        p = tn.placeholder(tn.bool, [])
        f, t = raw.switch(tn.constant(5), p)
        m, _ = raw.merge([raw.enter(t, "l"), raw.BACK_EDGE])
        lc = raw.loop_cond(m < raw.enter(tn.constant(8), "l", is_constant=True))
        lf, lt = raw.switch(m, lc)
        raw.close_back_edge(m, raw.next_iteration(lt + raw.enter(tn.constant(1), "l", is_constant=True)))
        loop_out = raw.exit(lf)
        out, idx = raw.merge([f * 100, loop_out])
    assert int(run(backend, g, out, {p: True})) == 8
    assert int(run(backend, g, out, {p: False})) == 500
    with pytest.raises(tn.DeadFetchError):
        run(backend, g, loop_out, {p: False})


def test_raw_argument_errors() -> None:
    g = tn.Graph()
    with g.as_default():
        with pytest.raises(tn.GraphBuildError):
            raw.merge([])
        with pytest.raises(tn.GraphBuildError, match="frame_name"):
            raw.enter(tn.constant(1), "")
        with pytest.raises(tn.GraphBuildError, match="parallel_iterations"):
            raw.enter(tn.constant(1), "f", parallel_iterations=0)
        with pytest.raises(tn.DTypeError, match="LoopCond"):
            raw.loop_cond(tn.constant(1))


def test_primitive_values_are_arrays(backend: str) -> None:
    g, n = counting_loop(2)
    v = run(backend, g, n["y"], {n["n"]: 2})
    assert isinstance(v, np.ndarray) and v.dtype == np.int32 and v.shape == ()


def test_a_header_node_reading_the_loop_cond_runs_as_on_the_reference(backend: str) -> None:
    """A hand-built loop whose header reads LoopCond's own output (``reads_lc``, a cast of it, switched
    like a loop variable and added into the body) counts as the reference counts. The fast backend
    cannot make that header (it makes the predicate the node reads): it refuses it by name and runs
    the program on the interpreter, with the reference's value, where it raised a bare ``KeyError``."""
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")
        e = raw.enter(tn.constant(0), "count", name="enter_i")
        n_in = raw.enter(n, "count", is_constant=True, name="enter_n")
        m, _ = raw.merge([e, raw.BACK_EDGE], name="merge_i")
        p = raw.loop_cond(tn.less(m, n_in), name="loop_cond")
        f, t = raw.switch(m, p, name="switch_i")
        _, one = raw.switch(tn.cast(p, tn.int32, name="reads_lc"), p, name="switch_flag")
        raw.close_back_edge(m, raw.next_iteration(tn.add(t, one, name="body"), name="next_i"))
        y = raw.exit(f, name="exit_i")
    if backend == "fast":
        with pytest.warns(RuntimeWarning, match=r'Cast node "reads_lc".* reads the output of LoopCond node '
                                                 r'"loop_cond".* in its loop\'s header'):
            assert int(run(backend, g, y, {n: 3})) == 3
        with pytest.raises(tn.UnsupportedError, match="reads the output of LoopCond"):
            tn.Session(g, backend="fast", fallback=False).run(y, {n: 3})
    else:
        assert int(run(backend, g, y, {n: 3})) == 3
