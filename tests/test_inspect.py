"""Graph inspection (``turnout.inspect``): ``pretty`` prints frames as nested blocks, ``to_dot`` gives
one Graphviz cluster per frame (nested), dashed back edges, dotted control edges, and paints a trace."""

from __future__ import annotations

import re
import shutil
import subprocess
from typing import Any

import pytest

import turnout as tn
from turnout import raw
from turnout.inspect import pretty, to_dot


def nested_loops() -> tuple[tn.Graph, tn.Tensor, tn.Tensor]:
    """y = x * 2**(2*3): an outer loop of 3 iterations around an inner loop of 2 doublings; then
    c = y - 100 if y > 100 else 2 * y."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        k = tn.constant(2.0, name="k")

        def outer(i: Any, y: Any) -> Any:
            _, z = tn.while_loop(lambda j, z: j < 2, lambda j, z: (j + 1, z * k), [tn.constant(0), y], name="inner")
            return i + 1, z

        _, y = tn.while_loop(lambda i, y: i < 3, outer, [tn.constant(0), x], parallel_iterations=4, name="outer")
        c = tn.cond(y > 100.0, lambda: y - 100.0, lambda: y * 2.0, name="clip")
    return g, x, c


def indent_of(text: str, needle: str) -> int:
    line = next(ln for ln in text.splitlines() if needle in ln)
    return len(line) - len(line.lstrip(" "))


def test_pretty_shows_nested_frames_as_blocks() -> None:
    g, _, _ = nested_loops()
    text = pretty(g)
    outer_frame = next(f for f in tn.static_frames(g).frames if len(f) == 1)[0]
    inner_frame = next(f for f in tn.static_frames(g).frames if len(f) == 2)[1]
    assert f'frame "{outer_frame}" (parallel_iterations=4) {{' in text
    assert f'frame "{inner_frame}" (parallel_iterations=10) {{' in text
    assert indent_of(text, f'frame "{outer_frame}"') == 0
    assert indent_of(text, f'frame "{inner_frame}"') == 2
    assert indent_of(text, "inner/loop_cond = LoopCond(") == 4  # the inner pivot, two frames deep
    assert indent_of(text, "outer/loop_cond = LoopCond(") == 2
    assert indent_of(text, "clip/merge = Merge(") == 0  # the cond after the loop is in the root frame
    assert text.count("{") == text.count("}") == 2
    # the inner loop reads the outer constant k through an Enter(is_constant) at each level
    assert re.search(r"= Enter\(k\) \[constant\] : float32\[\]", text)
    assert "outer/merge_2 = Merge(outer/enter_2, outer/next_iteration_2 (back edge)) : (float32[], int32[])" in text


def test_pretty_line_format() -> None:
    g = tn.Graph()
    with g.as_default():
        a = tn.placeholder(tn.float32, [2, None], name="a")
        with tn.device("cpu:1"):
            s = tn.reduce_sum(a, axis=1, name="s")
        big = tn.constant([1, 2, 3, 4, 5], name="big")
        with tn.control_dependencies([s]):
            tn.identity(big, name="after")
    lines = pretty(g).splitlines()
    assert lines[0] == "a = Placeholder() : float32[2, ?]"
    assert lines[1] == "s = Sum(a) [axis=1, keepdims=False] : float32[2] @cpu:1"
    assert lines[2] == "big = Const() [value=<int32[5]>] : int32[5]"
    assert lines[3] == "after = Identity(big, ^s) : int32[5]"


def test_pretty_survives_an_invalid_graph() -> None:
    g = tn.Graph()
    with g.as_default():
        m, _ = raw.merge([raw.enter(tn.constant(0), "F"), raw.BACK_EDGE], name="open")
        raw.exit(tn.constant(1), name="lost")
    text = pretty(g)
    assert text.startswith("# frames not shown: [W-Exit-In-Frame]")
    assert "open = Merge(Enter, BACK_EDGE?) : (int32[], int32[])" in text


def cluster_spans(dot: str) -> list[tuple[str, int, int]]:
    """(label, start, end) of every cluster, by matching braces."""
    spans = []
    for m in re.finditer(r"subgraph cluster_\d+ \{\n\s*label=\"(.*?)\";", dot):
        depth, i = 0, m.start()
        while True:
            ch = dot[i]
            depth += ch == "{"
            depth -= ch == "}"
            if ch == "}" and depth == 0:
                break
            i += 1
        spans.append((m.group(1), m.start(), i))
    return spans


def test_dot_has_one_nested_cluster_per_frame() -> None:
    g, _, _ = nested_loops()
    dot = to_dot(g)
    frames = [f for f in tn.static_frames(g).frames if f]
    spans = cluster_spans(dot)
    assert len(spans) == len(frames) == 2
    (outer_label, o_start, o_end), (inner_label, i_start, i_end) = spans
    assert "outer" in outer_label and "inner" in inner_label
    assert o_start < i_start and i_end < o_end  # the inner frame's cluster sits inside the outer one
    assert dot.count("{") == dot.count("}")
    inner_pivot = g.node("outer/body/inner/loop_cond").id
    assert i_start < dot.index(f"  n{inner_pivot} [") < i_end


def test_dot_edge_styles() -> None:
    g, _, _ = nested_loops()
    dot = to_dot(g)
    merge, nxt = g.node("outer/merge"), g.node("outer/next_iteration")
    assert re.search(rf'n{nxt.id} -> n{merge.id} \[label="0:1", style="dashed", constraint=false\];', dot)
    ctrl = g.node("outer/cond/Const")  # a constant in the loop, tied to the frame by a control edge
    (pivot,) = ctrl.control_inputs
    assert f'n{pivot.id} -> n{ctrl.id} [style="dotted", arrowhead="odot"];' in dot
    assert f'n{merge.id} [label="outer/merge\\nMerge", shape=invtriangle];' in dot


def test_dot_paints_a_trace() -> None:
    g, x, c = nested_loops()
    sess = tn.Session(g)
    assert float(sess.run(c, {x: 3.0}, trace=True)) == 3.0 * 64 - 100.0
    dot = to_dot(g, sess.last_result.trace)
    taken, untaken = g.node("clip/true/Sub"), g.node("clip/false/Mul")
    assert re.search(rf'n{taken.id} \[label="clip/true/Sub\\nSub\\nlive x1, dead x0".*style="filled"', dot)
    assert re.search(rf'n{untaken.id} \[label="[^"]*live x0, dead x1".*style="dashed", color="grey55"', dot)
    # the outer loop's Merge fires once per test: 3 iterations plus the final test
    merge = g.node("outer/merge")
    assert f'n{merge.id} [label="outer/merge\\nMerge\\nlive x4, dead x0"' in dot
    # plain dicts work as events too
    events = [{"node": e.node, "dead": e.dead} for e in sess.last_result.trace.events]
    assert to_dot(g, events) == dot


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz `dot` is optional and not installed here")
def test_dot_renders_with_graphviz() -> None:
    g, _, _ = nested_loops()
    out = subprocess.run(["dot", "-Tsvg"], input=to_dot(g), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "<svg" in out.stdout
