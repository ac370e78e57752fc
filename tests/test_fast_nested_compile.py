"""Nested loops compile to as many distinct XLA kernels at any depth, and their iteration bound still
names the loop that ran over.

Why count kernels: XLA:CPU compiles every *distinct* fused computation to machine code of its own
(identical ones share one), and each costs milliseconds. A check that writes a different constant at
every level of a nest (a nonterm code naming the loop by an absolute number) made an ``n``-deep nest
``n`` kernels, the larger part of its compile time. ``outcome.NONTERM`` codes count from the enclosing
loop, so every level's check is the same kernel. A kernel count is exact where a timing is noise
(timings: ``benchmarks/compile_time.py``).
"""

from __future__ import annotations

import re
from typing import Any

import graphs
import numpy as np
import pytest

import turnout as tn

jax = pytest.importorskip("jax")

from turnout.fast import facts  # noqa: E402
from turnout.fast.emit import Emitter  # noqa: E402
from turnout.fast.functionalize import functionalize  # noqa: E402
from turnout.fast.outcome import NONTERM, ErrorCodes  # noqa: E402
from turnout.fast.regions import WhileRegion, key, loop_height, loop_number, walk  # noqa: E402
from turnout.fast_options import FRAME_HEIGHT  # noqa: E402


def nested_loops(depth: int) -> tuple[tn.Graph, list[tn.Tensor], tn.Tensor]:
    """``graphs.nested_loops``: ``depth`` loops named ``level{d}``, each ``trips`` iterations."""
    g, x, trips, y = graphs.nested_loops(depth)
    return g, [x, trips], y


def compiled_text(depth: int) -> tuple[str, ErrorCodes, Any]:
    """The optimised HLO of the nest with its error word as a result (as the fast backend compiles
    it: a run-time bound, the word starting as a numpy 0), the codes, and the jitted function."""
    g, ins, y = nested_loops(depth)
    program = functionalize(g, [y], ins)
    codes = ErrorCodes()

    def fn(x: Any, trips: Any, max_iter: Any) -> Any:
        em = Emitter(program, codes, 4096, max_iter)
        em.state = {"err": np.int32(0)}
        em.fed = {t.node.id for t in ins}
        env = {key(ins[0]): x, key(ins[1]): trips}
        em.run_items(program.items, env)
        return env[key(y)], em.state["err"]

    f = jax.jit(fn)
    args = (np.float32(2.0), np.int32(1), np.int32(1_000_000))
    return f.lower(*args).compile().as_text(), codes, f


def distinct_kernels(hlo: str) -> int:
    """Fused computations that differ other than by their names: the kernels XLA:CPU compiles."""
    bodies = set()
    for m in re.finditer(r"\n%(fused\S*|wrapped\S*) \(([^\n]*)\) -> ([^\n]*) \{\n(.*?)\n\}", hlo, re.S):
        body = re.sub(r", metadata=\{[^}]*\}", "", m.group(4))
        bodies.add((re.sub(r"[\w.]+:", "", m.group(2)), m.group(3), re.sub(r"%[\w.\-]+", "%", body)))
    return len(bodies)


def test_a_deeper_nest_compiles_no_more_distinct_kernels() -> None:
    """Beyond the innermost ``FRAME_HEIGHT`` levels (one kernel for XLA, whatever their constants)
    every level adds the same kernels as the one below it."""
    shallow, _, _ = compiled_text(FRAME_HEIGHT + 4)
    deep, _, _ = compiled_text(FRAME_HEIGHT + 16)
    assert distinct_kernels(deep) == distinct_kernels(shallow)
    # the nest really is there: one XLA while per level
    assert len(re.findall(r" while\(", deep)) == FRAME_HEIGHT + 16


def test_the_error_word_names_the_loop_that_ran_over() -> None:
    """Read back straight from the compiled function: the code of the loop over budget, absolute
    once it has left every loop (frames and the plain loops inside them)."""
    _, codes, f = compiled_text(FRAME_HEIGHT + 3)
    assert int(f(np.float32(2.0), np.int32(2), np.int32(2))[1]) == 0
    code = int(f(np.float32(2.0), np.int32(3), np.int32(2))[1])
    assert code >= NONTERM
    kind, message = codes.lookup(code)
    # the innermost loop runs out first (the first to reach its third iteration)
    assert kind == "nonterm" and "level1" in message


def test_loops_are_numbered_in_pre_order() -> None:
    g, ins, y = nested_loops(3)
    program = functionalize(g, [y], ins)
    loops = [it for it in walk(program.items) if isinstance(it, WhileRegion)]
    assert [loop_number(program, r) for r in loops] == [1, 2, 3]
    assert [loop_height(program, r) for r in loops] == [3, 2, 1]
    assert loop_number(program, WhileRegion.__new__(WhileRegion)) == 0  # not in the tree


def _siblings() -> tuple[tn.Graph, dict[str, tn.Tensor], tn.Tensor]:
    """outer { a; mid { inner } }: ``a`` runs before ``mid`` in the outer body, so when both run
    over, ``a``'s error is the first, and it is carried into ``mid`` and ``inner`` (which must not
    count it from themselves)."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        na = tn.placeholder(tn.int32, [], name="na")
        nm = tn.placeholder(tn.int32, [], name="nm")
        ni = tn.placeholder(tn.int32, [], name="ni")

        def loop(n: Any, body: Any, v: Any, name: str) -> Any:
            return tn.while_loop(lambda i, w: i < n, lambda i, w: (i + 1, body(w)), [tn.constant(0), v],
                                 name=name)[1]

        def outer_body(w: Any) -> Any:
            a = loop(na, lambda v: v + 1.0, w, "a")
            return loop(nm, lambda v: loop(ni, lambda u: u * 2.0, v, "inner"), a, "mid")

        y = loop(tn.constant(1), outer_body, x, "outer")
    return g, {"x": x, "na": na, "nm": nm, "ni": ni}, y


@pytest.mark.parametrize("over, named", [
    ({"na": 5}, "outer/body/a/"),
    ({"nm": 5}, "outer/body/mid/frame"),
    ({"ni": 5}, "outer/body/mid/body/inner/"),
    ({"na": 5, "ni": 5}, "outer/body/a/"),        # a's error first, carried through mid and inner
    ({"na": 5, "nm": 5, "ni": 5}, "outer/body/a/"),
])
@pytest.mark.parametrize("frame_height", [0, FRAME_HEIGHT])
def test_the_first_loop_over_budget_is_named_on_both_backends(over: dict[str, int], named: str,
                                                              frame_height: int) -> None:
    """With every loop a frame (height 0) and with none (the nest is lower than ``FRAME_HEIGHT``)."""
    g, ph, y = _siblings()
    feeds = {ph["x"]: np.float32(1.0), **{ph[k]: np.int32(2) for k in ("na", "nm", "ni")}}
    feeds.update({ph[k]: np.int32(v) for k, v in over.items()})
    for sess in (tn.Session(g), tn.Session(g, backend="fast", frame_height=frame_height)):
        with pytest.raises(tn.NonTerminationError, match=f"loop frame '{re.escape(named)}"):
            sess.run(y, feeds, max_iterations=3)


def test_a_kernel_error_before_a_loop_over_budget_wins() -> None:
    """First error wins across the two kinds: a kernel error raised before a nested loop runs over
    is the one reported, as on the reference backend."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.int32, [], name="x")
        d = tn.placeholder(tn.int32, [], name="d")
        n = tn.placeholder(tn.int32, [], name="n")

        def body(w: Any) -> Any:
            q = w // d  # division by zero when d == 0
            return tn.while_loop(lambda j, v: j < n, lambda j, v: (j + 1, v + 1), [tn.constant(0), q],
                                 name="inner")[1]

        _, y = tn.while_loop(lambda i, w: i < 2, lambda i, w: (i + 1, body(w)), [tn.constant(0), x],
                             name="outer")
    feeds = {x: np.int32(7), d: np.int32(0), n: np.int32(9)}
    for sess in (tn.Session(g), tn.Session(g, backend="fast", frame_height=0)):  # both loops frames
        with pytest.raises(tn.KernelError):
            sess.run(y, feeds, max_iterations=3)


@pytest.mark.parametrize("light", [True, False])
def test_a_type_error_while_tracing_a_loop_body_surfaces(monkeypatch: pytest.MonkeyPatch, light: bool) -> None:
    """A loop whose carry is settled is traced inside ``lax.while_loop``, whose caller turns the loop's
    own type errors into a refusal (and a run on the interpreter). A ``TypeError`` of the emitter while
    it traces the body is a fault of the backend, not a loop variable changing shape: it surfaces as
    itself (a lowering rule's own errors are refusals naming the node, as before). Both loop forms:
    the light one (speculable header) and the general one (a header with a Sleep)."""
    from turnout.graph import Node

    inner = Emitter.run_items

    def faulty(self: Emitter, items: list[Any], env: dict[Any, Any]) -> None:
        if any(isinstance(it, Node) and it.op == "Tanh" for it in items):  # the loop's body only
            raise TypeError("a fault of the emitter")
        inner(self, items, env)

    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        n = tn.placeholder(tn.int32, [], name="n")

        def cond(i: Any, v: Any) -> Any:
            return i < n if light else tn.sleep(i, 0.0) < n

        _, y = tn.while_loop(cond, lambda i, v: (i + 1, tn.tanh(v) + x), [tn.constant(0), tn.constant(0.0)])
    (loop,) = [r for r in walk(functionalize(g, [y], {x: 1.0, n: 3}).items) if isinstance(r, WhileRegion)]
    assert facts.light_header(loop) is light
    monkeypatch.setattr(Emitter, "run_items", faulty)
    with pytest.raises(TypeError, match="a fault of the emitter"):
        tn.Session(g, backend="fast").run(y, {x: 1.0, n: 3})
