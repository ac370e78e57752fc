"""Laws of the repeated-run lane (``turnout.fast.lane``) that the repeated runs of
``tests/test_fast_lane.py`` do not pin down: which fed tensors keep a call in 64-bit mode, which
function an ahead-of-time executable is called through and when lowering gives none, the error a
dead fetch raises, how a run's Variables are written back, the feed signature a lane checks, what a
lane's text is written from (``describe``), and three repeated runs (overlapped reads, a specialised
feed given as a ``jax.Array``, a run handed back by its lane). Each law kills mutants of the full
set of ``fast/lane.py`` (issue 40, part 3).

The helpers are called directly, with stand-ins (a plain dict or a ``DeviceVariables`` for the
session's store, objects with a ``_call`` for an executable, tensors and backends of a few
attributes, a hand-made ``CallSpec``); the programs are tiny and run a few times on the fast backend
beside the reference. The file takes under a second after JAX's import.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import turnout as tn
import turnout.fast.lane as lane_module
from turnout.errors import DeadFetchError, dead_fetch_message
from turnout.fast.call_spec import CallArgs, CallSpec
from turnout.fast.lane import cpp_entry, describe, holds_wide, refuse_dead, signature, write_variables
from turnout.fast.lane_text import sources_of
from turnout.fast.variable_store import Deferred, DeviceVariables


def _fed(*dtypes: Any) -> list[tn.Tensor]:
    g = tn.Graph()
    with g.as_default():
        return [tn.placeholder(d, [None], name=f"x{i}") for i, d in enumerate(dtypes)]


def test_only_a_fed_tensor_of_more_than_four_bytes_a_value_keeps_the_call_in_64_bit_mode() -> None:
    """``holds_wide`` is true exactly when some fed tensor's values are wider than 32 bits (JAX would
    narrow them outside 64-bit mode): a 32-bit or narrower feed alone, or no feed, leaves it false."""
    assert not holds_wide([])
    assert not holds_wide(_fed(tn.float32, tn.int32, tn.bool))
    assert holds_wide(_fed(tn.float64))
    assert holds_wide(_fed(tn.float32, tn.int64))


def test_an_executable_is_called_through_its_cpp_entry_point_when_it_has_one() -> None:
    """``cpp_entry`` gives the executable's callable ``_call`` where there is one, and the executable
    itself where ``_call`` is missing or is not callable (a JAX without the entry point)."""
    def entry(*a: Any) -> Any:
        return a

    with_entry = SimpleNamespace(_call=entry)
    assert cpp_entry(with_entry) is entry
    without = SimpleNamespace()
    assert cpp_entry(without) is without
    not_callable = SimpleNamespace(_call=3)
    assert cpp_entry(not_callable) is not_callable


def test_a_dead_fetch_raises_the_message_every_backend_gives_for_the_first_dead_one() -> None:
    """``refuse_dead`` raises ``DeadFetchError`` naming the first fetch whose live flag is 0, in the
    words of ``dead_fetch_message``, and returns when every flag is set; flags and fetches must pair
    one to one."""
    a, b, c = _fed(tn.float32, tn.float32, tn.float32)
    refuse_dead([a, b, c], (1, 1, 1))
    with pytest.raises(DeadFetchError) as info:
        refuse_dead([a, b, c], (1, 0, 0))
    assert str(info.value) == dead_fetch_message(b.name, b.node)
    with pytest.raises(ValueError):
        refuse_dead([a, b], (1, 1, 1))


@pytest.mark.parametrize("store", ["dict", "device"])
def test_a_run_writes_back_fetched_new_values_deferred_new_values_and_keeps_the_rest(store: str) -> None:
    """``write_variables``: a Variable given a new value that was also fetched stores the fetched host
    value; one given a new value that was not fetched stores the device value (deferred in a
    ``DeviceVariables``, read back into a dict); one not written keeps its entry. Each device copy is
    recorded beside the very entry the store then holds, and the plan must pair with the copies."""
    old = np.zeros(2, np.float32)
    g = tn.Graph()
    with g.as_default():
        for name in ("f", "d", "k"):
            tn.Variable(old, name=name)
    variables: Any = {} if store == "dict" else DeviceVariables(g)
    for name in ("f", "d", "k"):
        variables[name] = old.copy()
    kept = variables.peek("k") if store == "device" else variables["k"]
    fetched = np.full(2, 5.0, np.float32)
    devs = [np.full(2, 1.0, np.float32), np.full(2, 2.0, np.float32), np.full(2, 3.0, np.float32)]
    dev_vars: dict[str, tuple[Any, Any]] = {}
    plan = (("f", True, 1), ("d", True, None), ("k", False, None))
    write_variables(plan, devs, [None, fetched], variables, dev_vars)
    peek = variables.peek if store == "device" else variables.get
    assert peek("f") is fetched and dev_vars["f"] == (fetched, devs[0])
    if store == "device":
        assert type(peek("d")) is Deferred and peek("d").dev is devs[1]
    else:
        np.testing.assert_array_equal(peek("d"), devs[1])
    assert dev_vars["d"][0] is peek("d") and dev_vars["d"][1] is devs[1]
    assert peek("k") is kept and dev_vars["k"][0] is kept and dev_vars["k"][1] is devs[2]
    with pytest.raises(ValueError):
        write_variables(plan, devs[:2], [None, fetched], variables, {})


class _Fed:
    """A fed tensor's stand-in for ``signature``: its dtype's numpy type and whether it is opaque."""

    def __init__(self, numpy: Any, opaque: bool = False) -> None:
        self.dtype = SimpleNamespace(numpy=numpy, is_opaque=opaque)


def _backend(version: int = 2, checked: int = 2, device_feed: Any = None) -> Any:
    """A backend's stand-in for ``signature``: graph version, checked version, ``device_feed``."""
    return SimpleNamespace(graph=SimpleNamespace(version=version), _checked_version=checked,
                           device_feed=device_feed or (lambda v: v))


def test_no_feed_signature_while_the_graph_awaits_validation_or_the_feeds_are_not_the_ones_given() -> None:
    """``signature`` is ``None`` when the graph's version is not the checked one (the feeds' count
    agreeing), or when the feed dict given holds another count of feeds than the converted ones."""
    t = _Fed(np.float32)
    feeds = {t: np.ones(2, np.float32)}
    assert signature(_backend(), feeds, feeds) is not None
    assert signature(_backend(version=3), feeds, feeds) is None
    assert signature(_backend(), feeds, {**feeds, "other": 1}) is None


def test_a_feed_signature_holds_a_python_numbers_type_and_an_arrays_type_dtype_and_shape() -> None:
    """Per feed, in the feeds' order: a Python number (int, float or bool) by its type, the tensor's
    dtype and numpy scalar type and no shape (it is converted per run); a numpy array or scalar of
    exactly the tensor's dtype by its type, dtype and shape. A number before an array does not end
    the signature."""
    ti, tf, tb = _Fed(np.int32), _Fed(np.float32), _Fed(np.bool_)
    ta, tg = _Fed(np.float32), _Fed(np.int64)
    a, gen = np.ones((2, 3), np.float32), np.int64(4)
    feeds = {ti: 3, tf: 1.5, tb: True, ta: a, tg: gen}
    assert signature(_backend(), feeds, feeds) == (
        (ti, int, (ti.dtype, np.int32), None), (tf, float, (tf.dtype, np.float32), None),
        (tb, bool, (tb.dtype, np.bool_), None), (ta, np.ndarray, a.dtype, (2, 3)), (tg, np.int64, gen.dtype, ()))


class _Sub(np.ndarray):
    """A numpy array subclass: the session checks it in full."""


@pytest.mark.parametrize("value", [[1.0, 2.0], np.ones(2, np.float64), np.float64(1.0),
                                   np.ones(2, np.float32).view(_Sub), "1.0"],
                         ids=["list", "other dtype", "other scalar dtype", "subclass", "string"])
def test_a_feed_that_needs_the_sessions_checks_gives_no_signature(value: Any) -> None:
    """A feed that is neither a Python number nor a numpy array or scalar (exactly ``np.ndarray``, or a
    numpy scalar) of the tensor's dtype gives no signature, whatever the feeds beside it."""
    t, other = _Fed(np.float32), _Fed(np.float32)
    feeds = {other: np.ones(1, np.float32), t: value}
    assert signature(_backend(), feeds, feeds) is None


def test_a_jax_array_feed_is_signed_only_of_its_tensors_dtype_not_opaque_and_on_the_backends_device() -> None:
    """A ``jax.Array`` feed is signed by its type, dtype and shape when it has exactly the tensor's dtype,
    the tensor's dtype is not opaque, and ``device_feed`` passes it as it is; else no signature."""
    v = jnp.ones((2,), jnp.float32)
    t = _Fed(np.float32)
    assert signature(_backend(), {t: v}, {t: v}) == ((t, type(v), v.dtype, (2,)),)
    assert signature(_backend(), {_Fed(np.int32): v}, {_Fed(np.int32): v}) is None
    o = _Fed(np.float32, opaque=True)
    assert signature(_backend(), {o: v}, {o: v}) is None
    moved = _backend(device_feed=lambda x: jnp.array(x, copy=True))
    assert signature(moved, {t: v}, {t: v}) is None


def _affine() -> tuple[tn.Graph, tn.Tensor, tn.Tensor, tn.Tensor]:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [None], name="x")
        y = x * 2.0 + 1.0
        z = y - x
    return g, x, y, z


@pytest.mark.parametrize("overlap", [False, True])
def test_a_lane_of_a_backend_that_overlaps_reads_starts_every_outputs_read_first(
        overlap: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the backend overlaps its reads (``overlap_reads``, on for a GPU; forced here), a ``Direct``
    run's lane hands the call's outputs to ``start_reads`` once per run, before reading them; where it
    does not (the CPU), the lane never calls it. The values are the reference's either way."""
    started: list[int] = []
    monkeypatch.setattr(lane_module, "start_reads", lambda vals: started.append(len(vals)))
    g, x, y, z = _affine()
    sess, ref = tn.Session(g, backend="fast"), tn.Session(g)
    sess.backend.overlap_reads = overlap
    for k in range(3):
        a = np.arange(3, dtype=np.float32) + k
        for got, want in zip(sess.run([y, z], {x: a}), ref.run([y, z], {x: a}), strict=True):
            np.testing.assert_array_equal(got, want)
    assert sess.last_result.stats["route"] == "lane"
    assert len(started) == (2 if overlap else 0) and all(started)  # (the two runs on the lane)


def test_a_plan_specialised_on_a_feed_given_as_a_jax_array_has_no_lane() -> None:
    """A lane compares a feed its plan is specialised on with the value on the host; fed as a
    ``jax.Array`` it cannot be, so no lane is made (``describe`` gives ``None``) and every run takes
    the general path, with the reference's values."""
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")
        x = tn.placeholder(tn.float32, [], name="x")
        y = tn.fill(tn.reshape(n, [1]), x) * 2.0
    sess, ref = tn.Session(g, backend="fast"), tn.Session(g)
    for xv in (1.0, 2.0, 3.0):
        got = sess.run(y, {n: jnp.asarray(3, jnp.int32), x: np.float32(xv)})
        np.testing.assert_array_equal(got, ref.run(y, {n: 3, x: np.float32(xv)}))
        assert sess.last_result.stats["route"] == "general"
        assert sess.last_result.stats["specialized_on"] == ["n:0"]


def _t(node: int) -> Any:
    """A tensor's stand-in for ``describe``: output 0 of node ``node``."""
    return SimpleNamespace(node=SimpleNamespace(id=node), index=0)


def _described(kind_b: Any = int, static: Any = None, **kw: Any) -> tuple[Any, dict[str, Any], Any]:
    """``describe`` of a call fed ``a`` (an array), ``b`` (a Python number of type ``kind_b``, which
    the plan is specialised on) and ``c`` (a small int array it is specialised on), in the call's
    argument order ``b, a, c``; returning output ``y`` (also Variable ``u``'s new value) and the packed
    ``z``; Variables ``u, w, k``, of which ``w`` comes back changed and ``k`` unchanged. Fetches:
    ``y, z`` and the fed ``a``."""
    a, b, c, y, z = _t(1), _t(2), _t(3), _t(5), _t(6)
    sig = ((a, np.ndarray, np.dtype(np.float32), (2,)), (b, kind_b, None, None),
           (c, np.ndarray, np.dtype(np.int32), (2,)))
    spec = CallSpec(args=CallArgs(feeds=((2, 0), (1, 0), (3, 0)), state=("var:u", "var:w", "var:k")),
                    stacks=(), out=((5, 0), (6, 0)), flags=False, changed=("var:w",),
                    aliases=(("var:u", (5, 0)),), packed=((6, 0), "how it packs"))
    env: dict[str, Any] = {}
    if static is None:
        static = {(3, 0): np.array([1, 2], np.int32), (2, 0): np.asarray(3, np.int32)}
    lc = describe(spec, sig, [y, z, a], None, ("u", "w", "k"), [0, 1, 2], kw.pop("overlap", False), env,
                  static, **kw)
    return lc, env, spec


def test_a_lane_call_lays_out_the_feeds_variables_and_fetches_as_the_call_spec_does() -> None:
    """``describe``: the call's fed arguments by their places in the signature; every Variable named
    for the lane's checks (``w{i}``) and counted; the state arguments as given; a store per Variable
    the call returns (its result's position, and the fetch that holds its value already where one is
    read back as an array, else ``None``), none for one it does not return; each fetch's source
    (``sources_of``); the packing in ``how``; and the route's own flags passed through."""
    lc, env, spec = _described(attempt=True, kept=(4,), overlap=True)
    assert lc.spec is spec and lc.sig[0][0].node.id == 1 and len(lc.sig) == 3
    assert lc.feeds == (1, 0, 2)
    assert lc.n_vars == 3 and lc.state == (0, 1, 2)
    assert [env[f"w{i}"] for i in range(3)] == ["u", "w", "k"]
    assert lc.stores == ((0, spec.position("var:u"), 0), (1, spec.position("var:w"), None))
    fetches = [_t(5), _t(6), _t(1)]
    assert lc.sources == sources_of(spec, fetches, [(1, 0), (2, 0), (3, 0)], None, {})
    assert env["how"] == "how it packs"
    assert (lc.attempt, lc.kept, lc.overlap) == (True, (4,), True)
    plain, _, _ = _described()
    assert (plain.attempt, plain.kept, plain.overlap) == (False, (), False)


def test_a_lane_call_checks_each_feed_its_plan_is_specialised_on_and_a_python_int_as_a_python_value() -> None:
    """The feeds the plan is specialised on are ``fixed`` (their places in the signature, in order),
    each with the value the plan took (``e{i}``); one fed as a Python int is also compared as the
    Python value (``x{i}``), one fed as an array or a Python float is not."""
    lc, env, _ = _described()
    assert lc.fixed == (1, 2)
    assert env["e1"] == 3 and np.array_equal(env["e2"], [1, 2])
    assert env["x1"] == 3 and type(env["x1"]) is int and "x2" not in env
    _, as_float, _ = _described(kind_b=float, static={(2, 0): np.asarray(3.0, np.float32)})
    assert "e1" in as_float and "x1" not in as_float


def test_no_lane_call_where_a_value_the_plan_is_specialised_on_is_not_a_host_feed() -> None:
    """``describe`` gives ``None`` where a value the plan is specialised on is not among the feeds (a
    tensor an earlier run computed) or is fed as a ``jax.Array``, which the lane cannot compare on the
    host."""
    assert _described(static={(9, 0): np.asarray(3, np.int32)})[0] is None
    assert _described(kind_b=jax.Array)[0] is None
    assert _described(static={})[0].fixed == ()


def test_a_run_handed_back_to_the_general_path_keeps_the_lane_it_was_handed_back_by() -> None:
    """A lane is made once per route and feed signature, under the graph's version (``lane.version``,
    which ``Repeats.lane`` compares): a run it hands back (a Variable set from outside since) takes
    the general path, which finds that lane again instead of making another, and the next run takes
    it, with the reference's values."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [None], name="x")
        v = tn.Variable(np.float32(2.0), name="v")
        y = x * v.read()
    sess, ref = tn.Session(g, backend="fast"), tn.Session(g)
    a = np.arange(3, dtype=np.float32)
    routes = []
    for k in range(4):
        if k == 2:
            sess.variables["v"] = np.float32(3.0)
            ref.variables["v"] = np.float32(3.0)
        np.testing.assert_array_equal(sess.run(y, {x: a + k}), ref.run(y, {x: a + k}))
        routes.append(sess.last_result.stats["route"])
    assert routes == ["general", "lane", "general", "lane"]
    assert len(sess._lanes[y]) == 1


class _Jitted:
    """A jitted function's stand-in for ``ahead_of_time``: its lowering records the arguments and its
    compilation returns ``executable``, counting a trace on ``backend`` when ``traces`` (a lowering
    that traced again) or raising when ``fails``."""

    def __init__(self, backend: Any, traces: bool = False, fails: bool = False) -> None:
        self.backend, self.traces, self.fails = backend, traces, fails
        self.executable, self.lowered_with = object(), None

    def lower(self, *args: Any) -> Any:
        if self.fails:
            raise RuntimeError("cannot lower")
        self.lowered_with = args
        return SimpleNamespace(compile=self.compile)

    def compile(self) -> Any:
        self.backend.compile_count += self.traces
        return self.executable


def test_the_ahead_of_time_executable_is_the_compilation_that_ran_never_a_new_trace() -> None:
    """``ahead_of_time`` gives the executable of ``fn`` lowered for the arguments given, and ``None``
    where lowering raises, or traced again (``backend.compile_count`` moved): that executable is not
    the one the run used, and the lane keeps the jitted function's route instead."""
    backend = SimpleNamespace(compile_count=4)
    fn = _Jitted(backend)
    assert lane_module.ahead_of_time(fn, (1, 2), backend) is fn.executable
    assert fn.lowered_with == (1, 2) and backend.compile_count == 4
    assert lane_module.ahead_of_time(_Jitted(backend, traces=True), (1,), backend) is None
    assert lane_module.ahead_of_time(_Jitted(backend, fails=True), (1,), backend) is None
