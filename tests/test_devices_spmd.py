"""The SPMD tier (``turnout.devices.spmd``): placed programs whose loops span devices, as one
``shard_map`` program over forced host devices (``tests/conftest.py`` forces eight).

Closed-form cases first (a loop spanning 2 and 4 devices, a cond inside a loop with its branches on
another device, Variables assigned on one device, the reference backend's error types), then a
property test: generated programs under random placements, whose results must equal the reference
backend's whenever ``spmd_choice`` accepts them, with a floor on the share it accepts.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from programs import Built, assert_same_outcome, assert_values_equal, build, to_source
from strategies import gradient_cases, placements, programs_with_inputs

import turnout as tn
from turnout.devices import place
from turnout.devices.spmd import SpmdPlan, spmd_choice
from turnout.fast.outcome import Discard
from turnout.session import RunOptions

OPTS = RunOptions()


def _cpu(i: int) -> str:
    return f"cpu:{i}"


def _plan(g: tn.Graph, fetches: list[tn.Tensor], fed: list[tn.Tensor], ndev: int, **kw: Any) -> SpmdPlan:
    plan = spmd_choice(g, place(g, [_cpu(i) for i in range(ndev)]), fetches, fed, **kw)
    assert not isinstance(plan, str), plan
    return plan


def _ring_loop(ndev: int) -> tuple[tn.Graph, tn.Tensor, list[tn.Tensor]]:
    """x_k lives on device k; each iteration x_k <- x_{k-1} * 2 + k: every value crosses a device."""
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")

        def body(i: Any, *xs: Any) -> Any:
            new = []
            for k in range(ndev):
                with tn.device(_cpu(k)):
                    new.append(xs[k - 1] * 2.0 + float(k))
            with tn.device(_cpu(0)):
                return (i + 1, *new)

        init = [tn.constant(float(k)) for k in range(ndev)]
        with tn.device(_cpu(0)):
            _, *xs = tn.while_loop(lambda i, *xs: i < n, body, [tn.constant(0), *init])
    return g, n, xs


def _ring_closed_form(ndev: int, n: int) -> list[float]:
    xs = [float(k) for k in range(ndev)]
    for _ in range(n):
        xs = [xs[k - 1] * 2.0 + k for k in range(ndev)]
    return xs


@pytest.mark.parametrize("ndev", [2, 4])
def test_loop_spanning_devices(ndev: int) -> None:
    g, n, xs = _ring_loop(ndev)
    plan = _plan(g, xs, [n], ndev)
    assert len(plan.devices) == ndev
    for trips in (0, 1, 5):
        r = plan.run({n: np.int32(trips)}, {}, OPTS)
        assert [float(v) for v in r.values] == _ring_closed_form(ndev, trips)
        assert r.stats["tier"] == "spmd"
    assert r.stats["compiles"] == 1, "a new trip count must not recompile"
    assert r.stats["moves_per_trace"] >= 1 and r.stats["broadcasts_per_trace"] >= 1


def test_cond_inside_loop_with_branches_on_another_device() -> None:
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")

        def body(i: Any, acc: Any) -> Any:
            with tn.device(_cpu(0)):
                odd = tn.equal(i % 2, 1)
            with tn.device(_cpu(1)):
                step = tn.cond(odd, lambda: acc * 3, lambda: acc + 100)
            with tn.device(_cpu(0)):
                return i + 1, step

        with tn.device(_cpu(0)):
            _, acc = tn.while_loop(lambda i, a: i < n, body, [tn.constant(0), tn.constant(1)])
    plan = _plan(g, [acc], [n], 2)
    want = 1
    for i in range(6):
        want = want * 3 if i % 2 else want + 100
    assert int(plan.run({n: np.int32(6)}, {}, OPTS).values[0]) == want
    assert int(tn.Session(g).run(acc, {n: 6})) == want


def test_variables_assigned_on_one_device() -> None:
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")
        with tn.device(_cpu(1)):
            total = tn.Variable(np.float32(0.0), name="total")

        def body(i: Any, x: Any) -> Any:
            with tn.device(_cpu(0)):
                x2 = x * 2.0
            with tn.device(_cpu(1)):
                upd = total.assign_add(x2)
            with tn.device(_cpu(0)):
                with tn.control_dependencies([upd]):
                    return i + 1, tn.identity(x2)

        with tn.device(_cpu(0)):
            _, x = tn.while_loop(lambda i, x: i < n, body, [tn.constant(0), tn.constant(1.0)])
    plan = _plan(g, [x], [n], 2)
    variables: dict[str, np.ndarray] = {}
    r = plan.run({n: np.int32(3)}, variables, OPTS)
    assert float(r.values[0]) == 8.0
    assert float(variables["total"]) == 2.0 + 4.0 + 8.0
    plan.run({n: np.int32(1)}, variables, OPTS)  # Variables persist across runs, as in a Session
    assert float(variables["total"]) == 14.0 + 2.0
    sess = tn.Session(g)
    sess.run(x, {n: 3})
    sess.run(x, {n: 1})
    assert float(sess.variables["total"]) == float(variables["total"])


def test_a_fetched_new_value_of_a_variable_and_a_constant_fetch() -> None:
    """A Variable assigned after a loop on another device, whose new value is also fetched: the run
    hands it out both as the fetch, from its owner device, and as the Variable's new value, run after
    run; a constant fetch (known while tracing) does not cross the program (``CallSpec.static``) and
    is merged by the run."""
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")
        with tn.device(_cpu(1)):
            total = tn.Variable(np.float32(1.0), name="total")
        with tn.device(_cpu(0)):
            _, x = tn.while_loop(lambda i, x: i < n, lambda i, x: (i + 1, x * 2.0), [tn.constant(0), tn.constant(1.0)])
        with tn.device(_cpu(1)):
            new = total.assign_add(x * 1.0)
            three = tn.constant(3.0) * 1.0
    plan = _plan(g, [new, x, three], [n], 2, only_spanning=False)
    variables: dict[str, np.ndarray] = {}
    for k, want in ((3, 9.0), (2, 13.0)):
        r = plan.run({n: np.int32(k)}, variables, OPTS)
        assert [float(v) for v in r.values] == [want, 2.0 ** k, 3.0]
        assert float(variables["total"]) == want
    assert (three.node.id, three.index) in next(iter(plan._compiled.values())).spec.static


def test_errors_keep_reference_types() -> None:
    g, n, xs = _ring_loop(2)
    plan = _plan(g, xs, [n], 2)
    with pytest.raises(tn.NonTerminationError):
        plan.run({n: np.int32(50)}, {}, RunOptions(max_iterations=10))
    with pytest.raises(tn.UnsupportedError, match="max_firings"):  # a firing budget compiled code cannot count
        plan.run({n: np.int32(5)}, {}, RunOptions(max_firings=100))
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")
        d = tn.placeholder(tn.int32, [], name="d")

        def body(i: Any, q: Any) -> Any:
            with tn.device(_cpu(1)):
                q2 = q + 10 // d
            with tn.device(_cpu(0)):
                return i + 1, q2

        with tn.device(_cpu(0)):
            _, q = tn.while_loop(lambda i, q: i < n, body, [tn.constant(0), tn.constant(0)])
    plan = _plan(g, [q], [n, d], 2)
    assert int(plan.run({n: np.int32(3), d: np.int32(5)}, {}, OPTS).values[0]) == 6
    with pytest.raises(tn.KernelError):
        plan.run({n: np.int32(3), d: np.int32(0)}, {}, OPTS)
    with pytest.raises(tn.KernelError):
        tn.Session(g).run(q, {n: 3, d: 0})


def test_dead_fetch_is_an_error() -> None:
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")
        with tn.device(_cpu(0)):
            _, x = tn.while_loop(lambda i, x: i < n, lambda i, x: (i + 1, x + 1), [tn.constant(0), tn.constant(0)])
        p = x > 2
        a, b = tn.raw.switch(x, p)
        with tn.device(_cpu(1)):
            t = b * 10  # lives only on the taken side of the switch

        def body(i: Any, y: Any) -> Any:
            with tn.device(_cpu(0)):
                y2 = y + x
            return i + 1, y2

        with tn.device(_cpu(1)):
            # a loop spanning both devices, so that the SPMD tier takes the program
            _, y = tn.while_loop(lambda i, y: i < n, body, [tn.constant(0), tn.constant(0)])
    pl = place(g, [_cpu(0), _cpu(1)])
    plan = spmd_choice(g, pl, [t, y], [n])
    assert not isinstance(plan, str), plan
    assert [int(v) for v in plan.run({n: np.int32(4)}, {}, OPTS).values] == [40, 16]
    with pytest.raises(tn.DeadFetchError):
        plan.run({n: np.int32(1)}, {}, OPTS)
    with pytest.raises(tn.DeadFetchError):
        tn.Session(g).run([t, y], {n: 1})


def test_ineligible_programs_say_why() -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        with tn.device(_cpu(0)):
            _, y = tn.while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, y * x), [tn.constant(0), x])
        with tn.device(_cpu(1)):
            z = y + 1.0
    pl = place(g, [_cpu(0), _cpu(1)])
    why = spmd_choice(g, pl, [z], [x])
    assert isinstance(why, str) and "no loop spans" in why
    one = spmd_choice(g, pl, [z], [x], only_spanning=False)  # still runs when asked to
    assert not isinstance(one, str) and float(one.run({x: np.float32(2.0)}, {}, OPTS).values[0]) == 17.0
    g3 = tn.Graph()
    with g3.as_default():
        x3 = tn.placeholder(tn.float32, [], name="x3")
        with tn.device("cpu:99"):  # this process has 8 CPU devices
            z3 = x3 + 1.0
    far = place(g3, [_cpu(0), "cpu:99"])
    why = spmd_choice(g3, far, [z3], [x3], only_spanning=False)
    assert isinstance(why, str) and "cpu:99" in why


def test_a_program_whose_trace_the_tier_refuses_is_a_discard_and_is_declined() -> None:
    """A program the SPMD trace cannot lower (a TensorArray stacked with nothing written to it) is
    the outcome ``Discard(refused=...)`` of ``SpmdPlan.run``, naming the node, as the one-device fused
    attempt's refusal is: a value for the caller to act on, not an exception that steers it. Nothing
    of the refused trace is kept, so a second run refuses again rather than calling a stale program.
    The partitioned backend declines the tier for that signature and the run goes on where it can:
    here the per-device tiers refuse it too, and it fails on the partitioned reference executor as
    it fails on the reference interpreter."""
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")
        with tn.device(_cpu(0)):
            stacked = tn.TensorArray(tn.float32, size=2).stack(name="never_written")
        with tn.device(_cpu(1)):
            z = tn.reduce_sum(stacked) + tn.cast(n, tn.float32)
    plan = _plan(g, [z], [n], 2, only_spanning=False)
    for _ in range(2):
        got = plan.run({n: np.int32(1)}, {}, OPTS)
        assert isinstance(got, Discard) and 'node "never_written"' in got.refused, got
        assert "nothing was written" in got.refused
    with pytest.raises(tn.KernelError, match="never written") as ref:
        tn.Session(g).run(z, {n: 1})
    sess = tn.Session(g, backend="fast", devices=[_cpu(0), _cpu(1)], whole_program="always")
    with pytest.raises(tn.KernelError, match="never written") as err, pytest.warns(RuntimeWarning, match="reference"):
        sess.run(z, {n: 1})
    assert type(err.value) is type(ref.value)
    plan_text = str(sess.explain([z], {n: 1}))  # (the per-device tiers refuse it too: the interpreter runs it)
    assert "fallback" in plan_text and 'node "never_written"' in plan_text, plan_text


def test_gradient_of_a_loop_spanning_devices() -> None:
    """Squaring 2.0 until it reaches 100 gives 256, whose gradient is 8 * 2**7 = 1024 (TensorFlow's
    closed form); the squaring runs on another device than the loop test, and the stacks start too
    small, so the run is repeated with larger ones."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")

        def cond(y: Any) -> Any:
            with tn.device(_cpu(0)):
                return y < 100.0

        def body(y: Any) -> Any:
            with tn.device(_cpu(1)):
                return y * y

        with tn.device(_cpu(0)):
            (y,) = tn.while_loop(cond, body, [x])
        dx = tn.gradients(y, x)[0]
    plan = spmd_choice(g, place(g, [_cpu(0), _cpu(1)]), [y, dx], [x], stack_capacity=4)
    assert not isinstance(plan, str), plan
    r = plan.run({x: np.float32(2.0)}, {}, OPTS)
    assert [float(v) for v in r.values] == [256.0, 1024.0]
    assert r.stats["stack_capacity"] == 4
    r = plan.run({x: np.float32(1.01)}, {}, OPTS)  # 9 iterations: the stacks grow again
    assert_values_equal(r.values, tn.Session(g).run([y, dx], {x: 1.01}), "gradient")
    assert r.stats["stack_capacity"] >= 9


def test_a_tensor_array_of_dynamic_size_grows_with_the_stacks() -> None:
    """A TensorArray of dynamic size written on one device from a loop spanning two has a buffer of the
    run's capacity, as on one device: a run that writes past it is repeated with twice the room, and
    reads the reference backend's value (its buffer once had one entry, whatever the capacity, so every
    retry overflowed again until the stacks' cap was reached and the run raised KernelError)."""
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")
        ta0 = tn.TensorArray(tn.float32, size=0, dynamic_size=True, element_shape=[])

        def body(i: Any, y: Any, ta: Any) -> Any:
            with tn.device(_cpu(1)):
                y2 = y * 2.0
            with tn.device(_cpu(0)):
                return i + 1, y2, ta.write(i, y2)

        with tn.device(_cpu(0)):
            _, _, ta = tn.while_loop(lambda i, y, ta: i < n, body, [tn.constant(0), tn.constant(1.0), ta0])
            out = ta.read(4)
    plan = _plan(g, [out], [n], 2, stack_capacity=2)
    r = plan.run({n: np.int32(6)}, {}, OPTS)
    assert float(r.values[0]) == float(tn.Session(g).run(out, {n: 6})) == 32.0
    assert r.stats["stack_capacity"] == 8 and r.stats["compiles"] == 3


# ---- generated programs under random placements ---------------------------------------------------------------
def _check_against_reference(plan: SpmdPlan, graph: tn.Graph, fetches: Any, feeds: dict[Any, Any], source: str,
                             pl: Any) -> None:
    """Run ``plan`` and the reference backend; their values and error types must be equal (a program
    that does not lower raises ``UnsupportedError`` on the plan, which the reference never raises)."""
    opts = RunOptions(max_iterations=1_000)
    assert_same_outcome(lambda: tn.Session(graph).run(fetches, feeds, options=opts),
                        lambda: plan.run(feeds, {}, opts).values, source + f"\nplacement: {pl.describe()}\nSPMD")


def test_generated_programs_equal_reference() -> None:
    """Whenever the SPMD tier accepts a generated program under a random placement, its values (and error
    types) equal the reference backend's; and it accepts a good share of programs with loops."""
    seen = {"programs": 0, "accepted": 0, "spanning": 0}

    @settings(max_examples=max(8, settings.default.max_examples // 4))
    @given(programs_with_inputs(loops=True), st.data())
    def check(pi: tuple[Any, dict[str, Any]], data: st.DataObject) -> None:
        p, inputs = pi
        b: Built = build(p)
        draw = data.draw(placements(b.graph))
        pl = place(b.graph, list(draw.devices), draw.requests)
        feeds = b.feed_dict(inputs)
        seen["programs"] += 1
        seen["spanning"] += not isinstance(spmd_choice(b.graph, pl, b.fetches, list(feeds)), str)
        plan = spmd_choice(b.graph, pl, b.fetches, list(feeds), only_spanning=False)
        if isinstance(plan, str):
            return
        _check_against_reference(plan, b.graph, b.fetches, feeds, to_source(p), pl)
        seen["accepted"] += 1

    check()
    assert seen["accepted"] >= 0.5 * seen["programs"], seen
    assert seen["spanning"] >= 0.2 * seen["programs"], seen


def test_generated_gradient_programs_equal_reference() -> None:
    """The same for the gradients of generated float programs (backward loops with stacks)."""
    seen = {"programs": 0, "accepted": 0}

    @settings(max_examples=max(4, settings.default.max_examples // 10))
    @given(st.data())
    def check(data: st.DataObject) -> None:
        case = data.draw(gradient_cases())
        draw = data.draw(placements(case.graph))
        pl = place(case.graph, list(draw.devices), draw.requests)
        seen["programs"] += 1
        plan = spmd_choice(case.graph, pl, case.grads, list(case.feeds), only_spanning=False, stack_capacity=2)
        if isinstance(plan, str):
            return
        source = to_source(case.program)
        _check_against_reference(plan, case.graph, case.grads, case.feeds, source, pl)
        seen["accepted"] += 1

    check()
    assert seen["accepted"] >= 0.5 * seen["programs"], seen


def test_a_case_in_a_spanning_loop_is_one_switch_with_its_assignments(switches: list[int]) -> None:
    """A ``tn.case`` in a loop spanning three devices is raised to one ``lax.switch`` (six branches:
    five and the default, not the mesh's three) and every branch's Variable assignment lands, at
    every index. Regression: the chain's predicates were speculated node by node, each node reading
    another device's copy of its input, so the switch took the wrong level (an assignment lost)."""
    g = tn.Graph()
    with g.as_default():
        k = tn.placeholder(tn.int32, [], name="k")
        v = tn.Variable(np.float64(1.0), name="v")

        def body(i: Any, s: Any) -> Any:
            def branch(j: int) -> Any:
                def fn() -> Any:
                    with tn.control_dependencies([v.assign_add(s * float(j + 1))]):
                        return s * 0.5 + float(j)
                return fn

            return i + 1, tn.case((i + k) % 6, [branch(j) for j in range(5)], default=lambda: s - 1.0)

        _, y = tn.while_loop(lambda i, s: i < 4, body, [tn.constant(0), tn.constant(np.float64(0.25))])
    req = {node.name: _cpu(j % 3) for j, node in enumerate(g.nodes)}
    for kv in range(6):
        ref = tn.Session(g)
        sess = tn.Session(g, backend="fast", devices=[_cpu(j) for j in range(3)], requests=req,
                          whole_program="always")
        switches.clear()
        np.testing.assert_allclose(sess.run(y, {k: kv}), ref.run(y, {k: kv}), rtol=1e-12)
        assert sess.last_result.stats["tier"] == "spmd"
        assert 6 in switches, switches
        np.testing.assert_allclose(sess.run(v.value()), ref.run(v.value()), rtol=1e-12)


def test_variables_a_run_assigns_stay_on_the_mesh_until_read() -> None:
    """The SPMD program's new Variable values go back as every backend's do (``lane.write_variables``):
    the session's store defers them (nothing is copied to the host by the run), the next run starts
    from the copies the last one left, a value read is the owner device's copy, a value set from
    outside is the one the next run takes, and a run on another tier reads what the SPMD run left."""
    from turnout.fast.variable_store import Deferred

    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [3], name="x")
        with tn.device(_cpu(1)):
            w = tn.Variable(np.ones(3, np.float32), name="w")

        def body(i: Any, a: Any) -> Any:
            with tn.device(_cpu(0)):
                b = a * 1.5
            with tn.device(_cpu(1)):
                return i + 1, b + w.read()

        with tn.device(_cpu(0)):
            _, y = tn.while_loop(lambda i, a: i < 3, body, [tn.constant(0), x])
        with tn.device(_cpu(1)):
            upd = w.assign_add(tn.reduce_sum(y) * tn.ones([3]) * 0.01)
            plain = w.read() * 2.0
    sess = tn.Session(g, backend="fast", devices=[_cpu(0), _cpu(1)], whole_program="always")
    ref = tn.Session(g, backend="reference")
    feed = {x: np.arange(3, dtype=np.float32)}
    for _ in range(2):
        got, want = sess.run([y, upd], feed), ref.run([y, upd], feed)
        assert sess.last_result.stats["tier"] == "spmd"
        np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
        entry = sess.variables.peek("w")
        assert type(entry) is Deferred and entry._host is None  # (no copy to the host by the run)
        assert entry.shape == (3,) and entry.dtype == np.float32
    np.testing.assert_allclose(sess.variables["w"], ref.variables["w"], rtol=1e-6)
    sess.variables["w"] = ref.variables["w"] = np.full(3, -2.0, np.float32)  # set from outside: taken
    np.testing.assert_allclose(sess.run(upd, feed), ref.run(upd, feed), rtol=1e-6)
    # another fetch, another tier (no loop spans devices): it reads what the SPMD run left
    sess.run([y, upd], feed), ref.run([y, upd], feed)
    np.testing.assert_allclose(sess.run(plain), ref.run(plain), rtol=1e-6)
    assert sess.last_result.stats["tier"] != "spmd"
