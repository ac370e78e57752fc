"""The fast backend's one-call path for repeated runs (``fast/backend.py``: ``Direct``) keeps every check.

Why these tests: that path skips work to cut the fixed cost of a ``Session.run``
(``benchmarks/run_overhead.py``): the session's default options are shared, the allocation limit is
installed only when it changes, and a program in which tracing finds no check that could fail and no
fetch that could be dead reads back only its fetches. Each skip must keep the errors of the full path.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import turnout as tn
from turnout.limits import DEFAULT_MAX_TENSOR_BYTES, current_limit


def _direct(sess: tn.Session) -> object:
    (d,) = sess.backend._direct.values()
    return d


def _call(d: object, feeds: tuple[object, ...], variables: tuple[object, ...] = ()) -> object:
    """The Direct function of a plan, called as a run calls it (flat arguments, ``fast.call_spec``: a
    loop-free program takes no bound): its outputs (by position), flags (``None`` where none come
    apart) and changed state, as its ``CallSpec`` splits them."""
    bound = (np.int32(10),) if d.args.bounded else ()  # type: ignore[attr-defined]
    out, flags, state = d.spec.split(d.fn(*feeds, *variables, *bound))  # type: ignore[attr-defined]
    return tuple(out.values()), flags, state


def test_a_program_with_nothing_to_check_reads_back_only_its_fetches() -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [3], name="x")
        y = x * 2.0 + 1.0
    sess = tn.Session(g, backend="fast")
    for v in ([1.0, 2.0, 3.0], [0.0, -1.0, 4.0]):
        np.testing.assert_allclose(sess.run(y, {x: np.array(v, np.float32)}), np.array(v) * 2 + 1)
        assert sess.last_result.stats["executor"] == "compiled"
    d = _direct(sess)
    _, flags, _ = _call(d, (np.zeros(3, np.float32),))  # type: ignore[misc]
    assert flags is None


def test_a_check_that_can_fail_is_read_back_on_every_repeated_run() -> None:
    g = tn.Graph()
    with g.as_default():
        a = tn.placeholder(tn.int32, [], name="a")
        b = tn.placeholder(tn.int32, [], name="b")
        q = a // b
    sess = tn.Session(g, backend="fast")
    assert sess.run(q, {a: 7, b: 2}) == 3
    assert sess.run(q, {a: 9, b: 3}) == 3  # the repeated run: straight to the compiled call
    d = _direct(sess)
    vals, flags, _ = _call(d, (np.int32(1), np.int32(1)))  # type: ignore[misc]
    # the error word and the live flag ride behind the int32 value (``fast.packing``): one array
    assert flags is None and d.spec.packed is not None and np.asarray(vals[0]).tolist() == [1, 0, 1]
    with pytest.raises(tn.KernelError, match="division by zero"):
        sess.run(q, {a: 9, b: 0})
    assert sess.run(q, {a: 8, b: 4}) == 2


def test_a_fetch_on_an_untaken_branch_is_dead_on_every_repeated_run() -> None:
    g = tn.Graph()
    with g.as_default():
        p = tn.placeholder(tn.bool, [], name="p")
        x = tn.placeholder(tn.float32, [], name="x")
        f, t = tn.raw.switch(x, p)
        y = t * 3.0
    sess = tn.Session(g, backend="fast")
    assert sess.run(y, {p: True, x: 2.0}) == 6.0
    assert sess.run(y, {p: True, x: 4.0}) == 12.0
    assert sess.last_result.stats["route"] == "lane"  # the repeats below are refused by the lane
    for _ in range(2):
        with pytest.raises(tn.DeadFetchError, match="is dead"):
            sess.run(y, {p: False, x: 2.0})
    assert sess.run(y, {p: True, x: 1.0}) == 3.0


def test_options_given_per_run_still_apply_after_runs_with_the_defaults() -> None:
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")
        _, s = tn.while_loop(lambda i, s: i < n, lambda i, s: (i + 1, s + i), [tn.constant(0), tn.constant(0)])
    sess = tn.Session(g, backend="fast")
    assert sess.run(s, {n: 5}) == 10
    assert sess.run(s, {n: 5}) == 10
    with pytest.raises(tn.NonTerminationError):
        sess.run(s, {n: 50}, max_iterations=10)
    assert sess.run(s, {n: 50}) == sum(range(50))
    with pytest.raises(ValueError, match="max_iterations"):
        sess.run(s, {n: 5}, max_iterations=0)


def test_the_allocation_limit_of_a_run_is_in_force_while_it_runs_and_restored_after() -> None:
    seen: list[object] = []

    class Recording:
        """A backend that records the limit it runs under."""

        def __init__(self, graph: tn.Graph) -> None:
            self.graph = graph

        def run(self, fetches: list, feeds: dict, variables: dict, options: object) -> object:
            from turnout.session import RunResult

            seen.append(current_limit())
            return RunResult(values=[np.float32(0.0) for _ in fetches])

    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
    sess = tn.Session(g)
    sess.backend = Recording(g)  # type: ignore[assignment]
    sess.run(x, {x: 1.0})
    sess.run(x, {x: 1.0}, max_tensor_bytes=1234)
    sess.run(x, {x: 1.0}, max_tensor_bytes=None)
    assert seen == [DEFAULT_MAX_TENSOR_BYTES, 1234, None]
    assert current_limit() == DEFAULT_MAX_TENSOR_BYTES


@pytest.mark.parametrize("backend", ["reference", "fast"])
def test_numpy_scalar_feeds_are_range_checked_on_every_run(backend: str) -> None:
    """Numpy scalars take the session's cached feed check (by tensor, dtype and shape); a narrowing
    feed still has its value checked on every run, not only the first time its signature is seen."""
    g = tn.Graph()
    with g.as_default():
        k = tn.placeholder(tn.int32, [], name="k")
        y = k + 1
    sess = tn.Session(g, backend=backend)
    for v in (np.int32(3), np.int32(4), np.int64(5), np.int64(6)):
        assert sess.run(y, {k: v}) == int(v) + 1
    with pytest.raises(tn.FeedError):
        sess.run(y, {k: np.int64(2**40)})
    with pytest.raises(tn.FeedError):
        sess.run(y, {k: np.float32(1.5)})
    assert sess.run(y, {k: np.int64(7)}) == 8


# ---- the hot path: a repeated run recognised by fetches and feed signature (``Repeats.recognise``) ----------
def test_a_loop_free_program_takes_no_iteration_bound_and_a_loop_does() -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        y = x * 2.0
        _, s = tn.while_loop(lambda i, s: i < 3, lambda i, s: (i + 1, s + x), [tn.constant(0), tn.constant(0.0)])
    free = tn.Session(g, backend="fast")
    free.run(y, {x: 1.0})
    assert _direct(free).args.bounded is False  # type: ignore[attr-defined]
    looped = tn.Session(g, backend="fast")
    assert looped.run(s, {x: 2.0}) == 6.0
    assert _direct(looped).args.bounded is True  # type: ignore[attr-defined]
    with pytest.raises(tn.NonTerminationError):
        looped.run(s, {x: 2.0}, max_iterations=2)  # the bound still reaches the hot path's call


def test_feeds_given_in_another_order_reach_their_tensors() -> None:
    g = tn.Graph()
    with g.as_default():
        a = tn.placeholder(tn.float32, [], name="a")
        b = tn.placeholder(tn.float32, [], name="b")
        d = a - 2.0 * b
    sess = tn.Session(g, backend="fast")
    for _ in range(2):
        assert sess.run(d, {a: 10.0, b: 1.0}) == 8.0
        assert sess.run(d, {b: 1.0, a: 10.0}) == 8.0
        assert sess.run(d, {b: 3.0, a: 1.0}) == -5.0
    assert len(sess.backend.repeats.routes) == 2  # one entry per feed order, each with its permutation


def test_a_variable_the_user_replaces_is_read_from_the_session() -> None:
    """The hot path reuses a Variable's device copy only while the session still holds the host array
    the last run saw; a replaced one takes the general path."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [2], name="x")
        v = tn.Variable(np.zeros(2, np.float32), name="v")
        upd = v.assign_add(x)
    sess = tn.Session(g, backend="fast")
    np.testing.assert_allclose(sess.run(upd, {x: np.ones(2, np.float32)}), [1, 1])
    np.testing.assert_allclose(sess.run(upd, {x: np.ones(2, np.float32)}), [2, 2])
    sess.variables["v"] = np.array([10.0, 20.0], np.float32)
    np.testing.assert_allclose(sess.run(upd, {x: np.ones(2, np.float32)}), [11, 21])
    sess.variables["v"] = np.array([5.0, 5.0], np.float32)
    np.testing.assert_allclose(sess.run(upd, {x: np.ones(2, np.float32)}), [6, 6])
    sess.backend.release_buffers()
    np.testing.assert_allclose(sess.run(upd, {x: np.ones(2, np.float32)}), [7, 7])
    np.testing.assert_allclose(sess.variables["v"], [7, 7])


def test_a_closed_back_edge_retires_the_hot_entry() -> None:
    """Plans are keyed on ``Graph.edits``; a hot entry recorded before an edit is never used after it."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        y = x + 1.0
    sess = tn.Session(g, backend="fast")
    assert sess.run(y, {x: 1.0}) == 2.0
    assert sess.backend.repeats.routes
    g._edits += 1  # what closing a back edge does (``Graph.edits``)
    before = sess.backend.compile_count
    assert sess.run(y, {x: 1.0}) == 2.0
    assert sess.backend.compile_count == before + 1  # a new plan for the new edits, not the old call


# ---- the hot path of a plan with gradient stacks: its fused attempt (``Repeats.run_fused``) ----------------
def _counting_hot_fused(sess: tn.Session) -> dict[str, int]:
    """Count the runs that the backend sends to a fused attempt's lane (``Repeats.run_hot`` with a
    ``HotFused`` route; an instance attribute shadows the method)."""
    from turnout.fast.repeat import HotFused

    repeats = sess.backend.repeats
    calls = {"n": 0}
    inner = repeats.run_hot

    def counted(d: object, *a: object, **k: object) -> object:
        calls["n"] += isinstance(d, HotFused)
        return inner(d, *a, **k)

    repeats.run_hot = counted  # type: ignore[method-assign]
    return calls


def test_repeated_gradient_runs_take_the_fused_hot_path_and_agree() -> None:
    import graphs

    g, x, n, y, dx = graphs.power_loop()
    sess = tn.Session(g, backend="fast")
    ref = tn.Session(g, backend="reference")
    calls = _counting_hot_fused(sess)
    for xv, trips in ((1.5, 20), (0.5, 30), (2.0, 7), (1.1, 100)):
        feed = {x: xv, n: trips}
        # (options given: the backend's route, not the session's lane before its checks)
        np.testing.assert_allclose(sess.run([y, dx], feed, options={}), ref.run([y, dx], feed), rtol=1e-12)
        assert sess.last_result.stats["fused"] is True
    assert calls["n"] == 3  # every run after the first
    assert sess.last_result.stats["stack_capacity"] == 128


def test_a_hot_run_that_outgrows_its_rung_climbs_on_the_general_path() -> None:
    import graphs

    g, x, n, y, dx = graphs.power_loop()
    sess = tn.Session(g, backend="fast")
    ref = tn.Session(g, backend="reference")
    calls = _counting_hot_fused(sess)
    for trips in (10, 11, 600, 12, 13):
        feed = {x: 1.001, n: trips}
        np.testing.assert_allclose(sess.run([y, dx], feed, options={}), ref.run([y, dx], feed), rtol=1e-12)
    # the run of 600 tried the hot path on the 128 rung, found it too small (nothing applied) and
    # climbed on the general path, which recorded the route to the 613 rung (the first that holds
    # 600 entries) for the runs of 12 and 13
    assert calls["n"] == 4
    assert sess.last_result.stats["stack_capacity"] == 613
    sess.backend.release_buffers()  # nothing kept: the general path allocates again
    np.testing.assert_allclose(sess.run([y, dx], {x: 1.5, n: 5}), ref.run([y, dx], {x: 1.5, n: 5}), rtol=1e-12)
    assert calls["n"] == 4


@pytest.mark.parametrize("route", ["hot", "lane"])
def test_a_hot_fused_run_raises_the_kernel_error_and_writes_no_variable(route: str, monkeypatch: Any) -> None:
    """A failed check in a repeated fused run, on the backend's route or the session's lane, raises
    what the general path raises, and a Variable update of that run is not applied; the next good
    run is. (Runs given options, even the defaults, never take the session's lane.)"""
    import turnout.fast.lane as lane_module

    failures = {"n": 0}
    lane_failure = lane_module.lane_failure

    def counted_failure(*a: Any) -> None:
        failures["n"] += 1
        lane_failure(*a)

    monkeypatch.setattr(lane_module, "lane_failure", counted_failure)
    opts: dict[str, Any] = {} if route == "lane" else {"options": {}}
    g = tn.Graph()
    with g.as_default():
        d = tn.placeholder(tn.int32, [], name="d")
        n = tn.placeholder(tn.int32, [], name="n")
        w = tn.Variable(np.float64(1.0), name="w")
        _, y = tn.while_loop(lambda i, y: i < n, lambda i, y: (i + 1, y * tn.cast(10 // d, tn.float64) * w.read()),
                             [tn.constant(0), tn.constant(1.0, tn.float64)])
        (dw,) = tn.gradients(y, [w])
        step = w.assign_add(dw * 0.0 + 1.0)
    sess = tn.Session(g, backend="fast")
    ref = tn.Session(g, backend="reference")
    calls = _counting_hot_fused(sess)
    for s_ in (sess, ref):
        s_.run([y, step], {d: 2, n: 3}, **opts)
        s_.run([y, step], {d: 5, n: 3}, **opts)
        s_.run([y, step], {d: 4, n: 3}, **opts)
    assert sess.last_result.stats["route"] == route
    with pytest.raises(tn.KernelError, match="division by zero"):
        sess.run([y, step], {d: 0, n: 3}, **opts)
    with pytest.raises(tn.KernelError, match="division by zero"):
        ref.run([y, step], {d: 0, n: 3})
    np.testing.assert_allclose(sess.variables["w"], ref.variables["w"])
    np.testing.assert_allclose(sess.run([y, step], {d: 1, n: 4}, **opts), ref.run([y, step], {d: 1, n: 4}))
    np.testing.assert_allclose(sess.variables["w"], ref.variables["w"])
    assert sess.last_result.stats["route"] == route
    # the failing run was a fused attempt's lane (the backend's or the session's): its error word
    # raised there
    assert failures["n"] == 1
    assert (calls["n"] >= 3) == (route == "hot")


@pytest.mark.parametrize("backend", ["reference", "fast"])
def test_jax_array_feeds_take_the_cached_check_and_keep_every_error(backend: str) -> None:
    """A jax.Array feed is checked by its (tensor, dtype, shape) once, like a numpy array; a narrowing
    one still has its values checked on every run."""
    jnp = pytest.importorskip("jax.numpy")
    import jax

    g = tn.Graph()
    with g.as_default():
        k = tn.placeholder(tn.int32, [2], name="k")
        y = k + 1
    sess = tn.Session(g, backend=backend)
    for v in (jnp.array([1, 2], jnp.int32), jnp.array([5, 6], jnp.int32)):
        assert sess.run(y, {k: v}).tolist() == [int(a) + 1 for a in v]
    with pytest.raises(tn.FeedError):
        sess.run(y, {k: jnp.array([1.5, 2.0], jnp.float32)})
    with pytest.raises(tn.FeedError):
        sess.run(y, {k: jnp.array([1, 2, 3], jnp.int32)})
    with jax.enable_x64(True):
        wide = jnp.array([3, 4], jnp.int64)
        assert sess.run(y, {k: wide}).tolist() == [4, 5]
        with pytest.raises(tn.FeedError):
            sess.run(y, {k: jnp.array([2**40, 1], jnp.int64)})
        assert sess.run(y, {k: wide}).tolist() == [4, 5]


def test_an_update_step_fetched_returns_the_new_value_once() -> None:
    """The output of an update (``v.assign_add(x)``) is the Variable's new value: the one-call function
    returns it once, and the run gives it to both the fetch and the session's Variable. A Variable
    written but not fetched, and one fetched but not written, keep their own slots."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [2], name="x")
        v = tn.Variable(np.zeros(2, np.float32), name="v")
        w = tn.Variable(np.ones(2, np.float32), name="w")
        u = tn.Variable(np.full(2, 5.0, np.float32), name="u")
        upd = v.assign_add(x)
        other = w.assign(x * 3.0)
        seen = u.read() + 0.0
    sess = tn.Session(g, backend="fast")
    ref = tn.Session(g)
    for step in range(3):
        feed = {x: np.array([1.0, step], np.float32)}
        got = sess.run([upd, seen, other.op], feed)
        want = ref.run([upd, seen, other.op], feed)
        np.testing.assert_allclose(got[0], want[0])
        np.testing.assert_allclose(got[1], want[1])
        for name in ("v", "w", "u"):
            np.testing.assert_allclose(sess.variables[name], ref.variables[name])
    (d,) = sess.backend._direct.values()
    # v's new value is the first fetch, returned once; w's is returned apart (its op is fetched, not it)
    alias = dict(d.spec.aliases)  # type: ignore[attr-defined]
    assert alias["var:v"] == (upd.node.id, upd.index) and "var:w" not in alias and "var:w" in d.spec.changed


def test_a_direct_runs_statistics_say_what_ran_word_for_word() -> None:
    """The statistics of a ``Direct`` run (one compiled call, no stacks), on its first run (the general
    path, which compiles) and on its lane: one stage, not fused, no stack traffic, the plan's capacity,
    the backend's compile count, one stage time and the route. A reader of ``last_result.stats`` (the
    benchmarks, ``Session.explain``'s tests) takes them at their word."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [3], name="x")
        v = tn.Variable(np.ones(3, np.float32), name="v")
        y = tn.reduce_sum(tn.tanh(x) * v)
        up = v.assign(v * 2.0)
    sess = tn.Session(g, backend="fast")
    zeros = {"stack_chunks_kept": 0, "stack_chunks_from_host": 0, "peak_device_stack_bytes": 0,
             "stack_chunks_swapped": 0, "peak_host_stack_bytes": 0, "stack_capacity_retries": 0}
    for route in ("general", "lane"):
        sess.run([y, up], {x: np.ones(3, np.float32)})
        stats = dict(sess.last_result.stats)
        seconds = stats.pop("stage_seconds")
        assert len(seconds) == 1 and 0 < seconds[0] < 60
        assert stats == {"backend": "fast", "stages": 1, "fused": False, "stack_capacity": 1024, **zeros,
                         "executor": "compiled", "compiles": 1, "route": route}
    np.testing.assert_allclose(sess.run(v.read()), [4.0, 4.0, 4.0])  # both runs wrote the Variable back
