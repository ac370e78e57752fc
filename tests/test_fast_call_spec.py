"""The one calling convention of compiled calls (``turnout.fast.call_spec``) and the one lane text
generator (``turnout.fast.lane_text``): a call built by ``flat_call`` returns what its ``CallSpec``
says, position by position, and both the ``Direct`` call and the fused attempt are described by one.
"""

from __future__ import annotations

import traceback
from typing import Any

import numpy as np
import pytest

import turnout as tn

jax = pytest.importorskip("jax")
jnp = jax.numpy

from turnout.fast.call_spec import CallArgs, CallSpec, LayoutCalls, Traced, flat_call, lay_out, tagged_call  # noqa: E402


def _build(err: Any) -> tuple[Any, list[Any]]:
    """A call of feeds ``a`` and ``b``, state ``v`` (assigned ``a + 1``, also fetched), ``u`` (left as it
    came), stack ``s`` (donated, doubled), and outputs ``a + 1``, ``a * b`` (large: cannot carry the
    flags), ``2 * b`` (small: carries them) and a constant; ``err`` is its error word."""
    specs: list[Any] = []

    def body(feeds: dict[Any, Any], state: dict[str, Any], stacks: dict[str, Any], bound: Any) -> Traced:
        a, b = feeds["a"], feeds["b"]
        new_v = a + 1.0
        const = np.float32(3.0) * np.ones(2, np.float32)
        out = {"v_out": new_v, "big": a * b, "small": jnp.sum(b) * 2.0, "const": const}
        lives = {"v_out": True, "small": True, "const": True}
        e = err(bound) if callable(err) else err
        return Traced(out, e, lives, {"var:v": new_v, "stack:s": stacks["stack:s"] * 2.0})

    args = CallArgs(("a", "b"), ("var:v", "var:u"), ("stack:s",), bounded=True)
    return flat_call(args, body, jax.jit, specs.append), specs


def _args() -> tuple[Any, ...]:
    return (np.arange(5000, dtype=np.float32), np.ones(5000, np.float32), np.zeros(5000, np.float32),
            np.ones(3, np.float32), jnp.ones(4, jnp.float32), np.int32(7))


def test_a_calls_results_are_where_its_spec_says() -> None:
    fn, specs = _build(lambda bound: jnp.where(bound > 100, 1, 0).astype(jnp.int32))
    res = fn(*_args())
    (spec,) = specs
    assert spec.args.donated() == (4,)
    # stacks first, in their arguments' order; then the outputs that cross; no flags vector (they
    # ride behind the small output); then no changed state (v's new value is an output, u is unchanged)
    assert spec.stacks == ("stack:s",) and spec.out == ("v_out", "big", "small") and not spec.flags
    assert spec.changed == () and dict(spec.aliases) == {"var:v": "v_out"}
    assert spec.packed is not None and spec.packed[0] == "small" and set(spec.static) == {"const"}
    assert len(res) == 1 + 3
    np.testing.assert_array_equal(np.asarray(res[spec.position("stack:s")]), np.full(4, 2.0, np.float32))
    np.testing.assert_array_equal(np.asarray(res[spec.position("var:v")]), np.arange(5000, dtype=np.float32) + 1)
    assert spec.position("var:v") == spec.position("v_out") and spec.returns("var:v") and not spec.returns("var:u")
    out, flags, state = spec.split(res)
    out, code, lives, _ = spec.read_flags(out, flags)
    assert code == 0 and lives == {"v_out": 1, "small": 1, "const": 1}
    assert float(out["small"]) == 10000.0 and set(state) == {"stack:s", "var:v"}
    np.testing.assert_array_equal(spec.static["const"], np.full(2, 3.0, np.float32))


def test_a_call_that_cannot_fail_returns_no_flags() -> None:
    fn, specs = _build(np.int32(0))
    res = fn(*_args())
    (spec,) = specs
    assert not spec.flags and spec.packed is None and len(res) == 4
    out, flags, _ = spec.split(res)
    assert flags is None and spec.read_flags(out, flags)[1:] == (0, {}, 0)


def _step() -> tuple[tn.Graph, dict[str, Any]]:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [3], name="x")
        d = tn.placeholder(tn.int32, [], name="d")
        v = tn.Variable(np.zeros(3, np.float32), name="v")
        u = tn.Variable(np.ones(3, np.float32), name="u")
        upd = v.assign_add(x * tn.cast(10 // d, tn.float32))
        seen = u.read() * 2.0
        const = tn.constant(np.array([1.0, 2.0], np.float32))
    return g, {"x": x, "d": d, "upd": upd, "seen": seen, "const": const}


def test_the_direct_call_returns_only_what_changed_and_keeps_constants_out() -> None:
    """The Direct call of an update step: the updated Variable comes back once (as the fetch), the
    read one not at all, the constant fetch not through the call; the values are the reference's on
    the general path and on the lane, and a caller that writes into a fetched constant changes no
    later run."""
    g, t = _step()
    fast, ref = tn.Session(g, backend="fast"), tn.Session(g, backend="reference")
    fetches = [t["upd"], t["seen"], t["const"]]
    for k in range(4):
        feed = {t["x"]: np.full(3, k, np.float32), t["d"]: 2}
        got, want = fast.run(fetches, feed), ref.run(fetches, feed)
        for a, b in zip(got, want, strict=True):
            np.testing.assert_allclose(a, b)
        got[2][:] = -1.0  # (the caller's copy)
        np.testing.assert_allclose(fast.variables["v"], ref.variables["v"])
    assert fast.last_result.stats["route"] == "lane"
    (d,) = fast.backend._direct.values()
    spec = d.spec
    assert spec.args.state == ("var:v", "var:u") or spec.args.state == ("var:u", "var:v")
    assert dict(spec.aliases) == {"var:v": (t["upd"].node.id, t["upd"].index)} and spec.changed == ()
    assert (t["const"].node.id, t["const"].index) in spec.static and not spec.returns("var:u")


def test_a_traceback_through_a_lane_shows_its_text() -> None:
    """A lane is generated text registered with ``linecache``: an error raised through it (a division
    by zero behind the error word) shows the lane's line that acted on the word."""
    g, t = _step()
    fast = tn.Session(g, backend="fast")
    for _ in range(3):
        fast.run([t["upd"]], {t["x"]: np.ones(3, np.float32), t["d"]: 2})
    assert fast.last_result.stats["route"] == "lane"
    with pytest.raises(tn.KernelError) as info:
        fast.run([t["upd"]], {t["x"]: np.ones(3, np.float32), t["d"]: 0})
    text = "".join(traceback.format_exception(info.value))
    assert "<turnout.fast.lane " in text and "fail(backend, plan, code, False)" in text


def test_both_routes_are_described_by_a_call_spec() -> None:
    """The fused attempt of a training step through a loop is called through the same convention:
    its spec's arguments are the feeds, the Variables and the kept stacks, and its kept stacks come
    back first, in their arguments' order."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [64], name="x")
        w = tn.Variable(np.full(64, 0.5, np.float32), name="w")
        _, h = tn.while_loop(lambda i, h: i < 5, lambda i, h: (i + 1, tn.tanh(h * w.read() + x)),
                             [tn.constant(0), tn.zeros([64], tn.float32)])
        loss = tn.reduce_sum(h * h)
        step = tn.train.SGD(0.1).minimize(loss)
    fast, ref = tn.Session(g, backend="fast"), tn.Session(g, backend="reference")
    for k in range(3):
        feed = {x: np.full(64, 0.1 * k, np.float32)}
        np.testing.assert_allclose(fast.run([loss, step], feed)[0], ref.run([loss, step], feed)[0], rtol=1e-5)
    assert fast.last_result.stats["fused"] and fast.last_result.stats["route"] == "lane"
    (plan,) = {p for p in fast.backend._plans.values() if p.fused is not None and p.fused.spec is not None}
    spec = plan.fused.spec
    assert spec.args.feeds == ((x.node.id, x.index),) and spec.args.state == ("var:w",) and spec.args.bounded
    assert spec.stacks == spec.args.stacks[:len(spec.stacks)] and spec.returns("var:w")


def test_a_second_trace_that_lays_its_results_out_otherwise_is_refused() -> None:
    """Its callers read every call by the one spec they hold: a second trace of one function whose
    flags ride behind another output (a small value the first time, too large the second) would
    have calls to the first trace misread, so it is refused loudly."""
    specs: list[Any] = []

    def body(feeds: dict[Any, Any], state: dict[str, Any], stacks: dict[str, Any], bound: Any) -> Traced:
        x = feeds["x"]
        return Traced({"y": x * 2.0}, (x[0] > 100.0).astype(jnp.int32), {"y": True}, {})

    fn = flat_call(CallArgs(("x",), (), (), bounded=False), body, jax.jit, specs.append)
    fn(np.ones(3, np.float32))
    assert specs[0].packed is not None
    fn(np.ones(3, np.float32) * 5)  # (the same trace)
    with pytest.raises(AssertionError, match="laid its results out otherwise"):
        fn(np.ones(5000, np.float32))
    assert len(specs) == 1


def test_a_carried_word_leaves_in_the_state_and_nothing_rides_behind_an_output() -> None:
    """A segment's error word comes in as state and leaves as state (``CallArgs.carries_word``): the
    next segment's outputs must stay device values, so a small fetched output with a traced live flag
    does not carry the flags, which hold 0 in the word's place."""
    from turnout.fast.call_spec import lay_out

    args = CallArgs(("x",), ("err", "var:u"), ())
    assert args.carries_word and not CallArgs(("x",), ("var:u",), ()).carries_word
    seen: list[Any] = []

    def fn(x: Any, err: Any, u: Any) -> Any:
        spec, res = lay_out(args, Traced({"y": x * 2.0}, 0, {"y": x[0] > 0}, {"err": err + 1}))
        seen.append(spec)
        return res

    res = jax.jit(fn)(np.ones(3, np.float32), np.int32(4), np.zeros(2, np.float32))
    (spec,) = seen
    assert spec.packed is None and spec.flags and spec.changed == ("err",)
    out, flags, state = spec.split(res)
    assert np.asarray(flags).tolist() == [0, 1] and int(state["err"]) == 5
    np.testing.assert_array_equal(np.asarray(out["y"]), np.full(3, 2.0, np.float32))


class _Emitter:
    """What ``SegmentFn`` needs of an emitter, for one item: ``y = x + 1`` (a constant while tracing
    when ``x`` is one), which also sets the error word where ``x`` is traced."""

    def __init__(self, state: dict[str, Any]) -> None:
        self.state, self.lives = dict(state), {}

    def run_items(self, items: list[Any], env: dict[Any, Any]) -> None:
        x = env["x"]
        env["y"] = np.asarray(x + 1) if isinstance(x, np.ndarray) else x + 1
        if not isinstance(x, np.ndarray):
            self.state["err"] = self.state["err"] + 1


def test_each_segment_call_is_read_by_the_spec_of_its_own_trace() -> None:
    """A segment traced again for another type of what it reads (a constant, then a device value) lays
    its results out otherwise: ``y`` a constant kept out of the call, then a result. Each call is read
    by the spec of the trace that made it, including a call that reuses an earlier trace."""
    from turnout.fast.segment import SegmentFn
    from turnout.fast.values import Static

    traces: list[int] = []

    def emitter(state: dict[str, Any], bound: Any) -> Any:
        traces.append(1)
        return _Emitter(state)

    seg = SegmentFn(["item"], ["y"], set(), emitter, jax.jit)  # type: ignore[arg-type]
    state = {"err": jnp.int32(0)}
    for x, want_y, want_err in ((Static(np.array(1.0)), 2.0, 0), (jnp.asarray(5.0), 6.0, 1),
                                (Static(np.array(2.0)), 3.0, 0), (jnp.asarray(7.0), 8.0, 1)):
        out, lives, new = seg({"x": x}, state, np.int32(10))
        assert float(np.asarray(out["y"])) == want_y and int(new["err"]) == want_err and lives == {}
        assert isinstance(out["y"], np.ndarray) == isinstance(x, Static)
    assert len(traces) == 3  # (the last call reuses the second trace)


def test_flat_arguments_keyed_again_are_exactly_those_laid_out() -> None:
    """``CallArgs.keyed`` inverts ``CallArgs.flat``, group by group (feeds, state, stacks, the
    bound), and refuses arguments of another count in any group, rather than keying a shorter
    tuple's values to the wrong names."""
    args = CallArgs((("a", 0), ("b", 0)), ("err", "var:v"), ("stack:1",), True)
    feeds, state, stacks = {("a", 0): 1, ("b", 0): 2}, {"err": 3, "var:v": 4}, {"stack:1": 5}
    flat = args.flat(feeds, state, stacks, 6)
    assert flat == (1, 2, 3, 4, 5, 6)
    assert args.keyed(flat) == (feeds, state, stacks, 6)
    for short in ((1,), (1, 2, 3), (1, 2, 3, 4)):  # a feed, a state entry, a stack missing
        with pytest.raises(ValueError):
            args.keyed(short)
    unbounded = CallArgs((("a", 0),), ("err",), (), False)
    assert unbounded.keyed((1, 3)) == ({("a", 0): 1}, {"err": 3}, {}, None)
    # (the last group of a call is checked on its own too: feeds alone, or feeds and state alone)
    for last, short in ((CallArgs((("a", 0), ("b", 0)), (), (), False), (1,)),
                        (CallArgs((("a", 0),), ("err", "var:v"), (), False), (1, 3))):
        with pytest.raises(ValueError):
            last.keyed(short)


def test_changed_state_sits_after_the_outputs_and_a_flags_vector_in_its_own_order() -> None:
    """A call whose flags cannot ride behind an output (its one output is large) returns them as a
    vector after the outputs; two state entries that leave changed (no output aliases them) follow,
    in their order. ``outputs``, ``position`` and ``split`` all read that layout."""
    specs: list[Any] = []

    def body(feeds: dict[Any, Any], state: dict[str, Any], stacks: dict[str, Any], bound: Any) -> Traced:
        a = feeds["a"]
        new = {"var:p": state["var:p"] + 1.0, "var:q": state["var:q"] * 3.0, "stack:s": stacks["stack:s"] + 5.0}
        return Traced({"big": a * 2.0}, jnp.where(bound > 100, 1, 0).astype(jnp.int32), {"big": True}, new)

    args = CallArgs(("a",), ("var:p", "var:q"), ("stack:s",), bounded=True)
    fn = flat_call(args, body, jax.jit, specs.append)
    res = fn(np.arange(5000, dtype=np.float32), np.zeros(2, np.float32), np.ones(2, np.float32),
             jnp.zeros(3, jnp.float32), np.int32(7))
    (spec,) = specs
    assert spec.flags and spec.packed is None and spec.stacks == ("stack:s",) and spec.out == ("big",)
    assert spec.changed == ("var:p", "var:q") and len(res) == 1 + 1 + 1 + 2
    assert spec.outputs() == slice(1, 2)
    np.testing.assert_array_equal(np.asarray(res[spec.outputs()][0]), np.arange(5000, dtype=np.float32) * 2)
    assert [spec.position(k) for k in ("stack:s", "big", "var:p", "var:q")] == [0, 1, 3, 4]
    np.testing.assert_array_equal(np.asarray(res[spec.position("var:p")]), np.ones(2, np.float32))
    np.testing.assert_array_equal(np.asarray(res[spec.position("var:q")]), np.full(2, 3.0, np.float32))
    out, flags, state = spec.split(res)
    assert set(out) == {"big"} and set(state) == {"stack:s", "var:p", "var:q"}
    np.testing.assert_array_equal(np.asarray(state["stack:s"]), np.full(3, 5.0, np.float32))
    assert spec.read_flags(out, flags)[1:] == (0, {"big": 1}, 0)


def test_a_second_trace_with_the_same_layout_and_constant_outputs_is_taken() -> None:
    """Traced again for another shape, a call lays its results out as before: taken, though its
    constant outputs are new arrays (their values are merged by the caller, not part of the layout)."""
    specs: list[Any] = []

    def body(feeds: dict[Any, Any], state: dict[str, Any], stacks: dict[str, Any], bound: Any) -> Traced:
        x = feeds["x"]
        const = np.full(2, 7.0, np.float32)  # (a fresh array in every trace)
        return Traced({"y": x * 2.0, "c": const}, np.int32(0), {"y": True, "c": True}, {})

    fn = flat_call(CallArgs(("x",), (), (), bounded=False), body, jax.jit, specs.append)
    for n in (3, 4):
        (y,) = fn(np.ones(n, np.float32))
        np.testing.assert_array_equal(np.asarray(y), np.full(n, 2.0, np.float32))
    assert len(specs) == 2 and specs[0] == specs[1] and specs[0].static["c"] is not specs[1].static["c"]


def test_flags_read_back_are_exactly_as_many_as_the_spec_has_live_keys() -> None:
    """``CallSpec.read_flags`` pairs the words after the error word with the spec's live keys one for
    one: a flags vector of another length (a call read by another trace's spec) is refused, never
    read as the flags of the first keys it happens to cover."""
    spec = CallSpec(CallArgs((), ()), (), ("a",), True, (), live=("a", "b"))
    assert spec.read_flags({"a": 5}, np.asarray([0, 1, 0])).lives == {"a": 1, "b": 0}
    for wrong in ([0, 1], [0, 1, 0, 1]):
        with pytest.raises(ValueError):
            spec.read_flags({"a": 5}, np.asarray(wrong))


def test_flat_results_split_again_are_exactly_those_laid_out() -> None:
    """``CallSpec.split`` keys the flat results group by group (stacks, outputs, flags, changed state)
    and refuses results of another count in any group, rather than keying a shorter tuple's values
    to the wrong names. Each group is made the last one in turn, so that only it comes short."""
    full = CallSpec(CallArgs((), ()), ("s",), ("a",), True, ("v",))
    assert full.split((1, 2, 3, 4)) == ({"a": 2}, 3, {"s": 1, "v": 4})
    assert full.read_flags({"a": 2}, np.asarray([5])).lives == {}  # (no live key: the word alone)
    for spec, short in ((CallSpec(CallArgs((), ()), ("s", "t"), (), False, ()), (1,)),
                        (CallSpec(CallArgs((), ()), ("s",), ("a", "b"), False, ()), (1, 2)),
                        (CallSpec(CallArgs((), ()), ("s",), ("a",), True, ("v", "w")), (1, 2, 3, 4))):
        with pytest.raises(ValueError):
            spec.split(short)


def test_a_mark_known_to_be_zero_while_tracing_adds_no_flags() -> None:
    """The stacks' high-water mark rides in the flags only where it may be nonzero: a call whose mark
    and error word are constant zeros, every fetch live, returns no flags vector at all."""
    args = CallArgs(("a",), ())
    zero = np.int32(0)
    spec, res = lay_out(args, Traced({"y": jnp.ones(2)}, zero, {"y": True}, {}, mark=zero))
    assert not spec.marked and not spec.flags and len(res) == 1
    spec, res = lay_out(args, Traced({"y": jnp.ones(2)}, zero, {"y": True}, {}, mark=np.int32(3)))
    out, flags, _ = spec.split(res)
    assert spec.marked and spec.read_flags(out, flags)[1:] == (0, {"y": 1}, 3)


def test_a_segment_call_donates_its_stacks_and_hands_out_copies_of_its_constants() -> None:
    """A call's stacks are donated (the one buffer of a stack is its argument's, reused for its
    result), and a constant output is a copy that a caller may write into: the next call, which reuses
    the trace, hands out the trace's constant unchanged."""
    def body(feeds: dict[Any, Any], state: dict[str, Any], stacks: dict[str, Any], bound: Any) -> Traced:
        return Traced({"c": np.arange(3.0)}, np.int32(0), {}, {"stack:s": stacks["stack:s"] + 1.0})

    calls = LayoutCalls(body, jax.jit)
    for _ in range(2):
        stack = jnp.zeros(4)
        out, lives, new = calls({}, {}, {"stack:s": stack}, None)
        assert stack.is_deleted() and np.asarray(new["stack:s"]).tolist() == [1.0] * 4
        assert out["c"].tolist() == [0.0, 1.0, 2.0]
        out["c"][:] = -1.0  # (the caller's to change)
    fn = tagged_call(CallArgs((), (), ("stack:s",), False), body, jax.jit)
    stack = jnp.zeros(4)
    fn(stack)
    assert stack.is_deleted()
