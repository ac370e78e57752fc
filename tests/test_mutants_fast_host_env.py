"""Laws of the host's environment (``turnout.fast.host_env``): a scope's values, the device each lives
on, the copies made to other devices, the futures of a threaded run's segment calls, the abstract
values a trace that runs nothing reads, and a run's fetches. Each law kills mutants of the full set of
``fast/host_env.py`` (issue 40, part 3; ``python tools/mutation.py --module fast/host_env.py --all``);
the partitioned runs of its list reach the same code in seconds, these direct calls in milliseconds.

A segment call's future is a ``concurrent.futures.Future`` already done, holding what a worker's call
gives back: ``(outputs, live flags, error word)``.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

import jax
import numpy as np
import pytest

import turnout as tn
from turnout.errors import DeadFetchError
from turnout.fast import host_env
from turnout.fast.host_env import HostEnv, Lazy, abstract, fetched, resolved, switched, where_of
from turnout.fast.regions import key
from turnout.fast.values import DEAD, Handle

X, Y, MARK = (7, 0), (7, 1), (7, -1)  # two outputs of node 7 and its deadness marker


def _done(out: dict[Any, Any], lives: dict[Any, Any] | None = None) -> Future[Any]:
    """A segment call's future, already returned: ``out`` and ``lives`` as a worker's call gives them."""
    fut: Future[Any] = Future()
    fut.set_result((out, lives or {}, None))
    return fut


def _on(device: int, value: float) -> Any:
    """A JAX scalar placed on the CPU device numbered ``device``."""
    return jax.device_put(np.float32(value), jax.devices()[device])


def test_the_module_exports_what_it_defines() -> None:
    """``host_env.__all__`` names exactly the module's own public classes and functions, each once
    (``tests/test_exports.py``'s law, for this module alone, and none of its own left out): the
    runner, the host's control and the executors import them by name. Kills the ``__all__``
    mutants without running the device tests of the list."""
    own = {name for name, v in vars(host_env).items()
           if not name.startswith("_") and getattr(v, "__module__", None) == host_env.__name__}
    assert sorted(host_env.__all__) == sorted(own) and len(set(host_env.__all__)) == len(host_env.__all__)


def test_an_environment_starts_from_copies_of_the_dicts_it_is_given() -> None:
    """``HostEnv(vals, where, copies)`` holds what it is given, in dicts of its own: what it sets
    later changes none of the caller's dicts (a child scope is made this way from its parent's)."""
    vals, where, copies = {X: 1.0}, {X: "a"}, {X: {"b": 2.0}}
    env = HostEnv(vals, where, copies)
    assert (env.vals, env.where, env.copies) == (vals, where, copies)
    env.set(X, 3.0, None)
    env.set(Y, 4.0, None)
    assert (vals, where, copies) == ({X: 1.0}, {X: "a"}, {X: {"b": 2.0}})
    empty = HostEnv()
    assert (empty.vals, empty.where, empty.copies) == ({}, {}, {})


def test_a_child_scope_sees_its_parent_and_keeps_what_it_sets() -> None:
    """A branch's or an iteration's scope (``child``) reads its parent's values, their devices and
    their copies; what it sets (a value, where it lives, a dropped copy) stays out of the parent."""
    parent = HostEnv({X: 1.0}, {X: "a"}, {X: {"b": 2.0}})
    inner = parent.child()
    assert (inner.vals, inner.where, inner.copies) == (parent.vals, parent.where, parent.copies)
    inner.set(X, 5.0, None)
    inner.set(Y, _on(0, 6.0), "a")
    assert parent.vals == {X: 1.0} and parent.where == {X: "a"} and parent.copies == {X: {"b": 2.0}}
    assert inner.vals[X] == 5.0 and inner.where == {X: None, Y: "a"} and X not in inner.copies


def test_a_value_set_lives_where_it_was_made_and_drops_its_old_copies() -> None:
    """``set`` records the device a value was made on (none for a value known on the host) and
    forgets the copies of the key's previous value, which no longer hold it."""
    env = HostEnv({X: _on(0, 1.0)}, {X: "a"}, {X: {"b": _on(1, 1.0)}, Y: {"b": 0.0}})
    env.set(X, _on(0, 2.0), "a")
    assert env.where[X] == "a" and X not in env.copies and Y in env.copies
    env.set(X, np.float32(3.0), "a")
    assert env.where[X] is None


def test_take_reads_the_other_scopes_value_where_it_lives() -> None:
    """``take`` copies another scope's value under a new key, with its device (a value whose device
    the other scope does not know is a host value)."""
    src = HostEnv({X: 1.0, Y: _on(1, 2.0)}, {Y: "b"})
    dst = HostEnv()
    dst.take(MARK, src, Y)
    assert dst.vals[MARK] is src.vals[Y] and dst.where[MARK] == "b"
    dst.take(MARK, src, X)
    assert dst.vals[MARK] == 1.0 and dst.where[MARK] is None


def _switch_graph() -> tuple[Any, Any, Any]:
    """A Switch of a placeholder ``x`` on a predicate ``p``: its node, ``x`` and ``p``."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        p = tn.placeholder(tn.bool, [], name="p")
        f, _ = tn.raw.switch(x, p)
    return f.node, x, p


@pytest.mark.parametrize("taken", [0, 1])
def test_a_scope_past_switches_forwards_the_data_to_the_side_taken_and_kills_the_other(taken: int) -> None:
    """``switched`` (a cond's branch, a loop's body or exit side): the Switch's output ``taken``
    holds its data input, on the data's device; the other output is ``DEAD``, known on the host;
    the parent scope is left as it was."""
    s, x, _ = _switch_graph()
    v = _on(1, 2.0)
    env = HostEnv({key(x): v}, {key(x): "b"})
    out = switched(env, [s], taken)
    assert out.vals[key(s.outputs[taken])] is v and out.where[key(s.outputs[taken])] == "b"
    assert out.vals[key(s.outputs[1 - taken])] is DEAD and out.where[key(s.outputs[1 - taken])] is None
    assert out.vals[key(x)] is v and set(env.vals) == {key(x)}


def test_wire_takes_a_source_where_it_lives_and_a_constant_on_the_host() -> None:
    """``wire``: a wire with a source takes the source's value from ``src`` with its device; one
    without sets its constant, known on the host."""
    from turnout.fast.plumbing import Wire

    s, x, _ = _switch_graph()
    v = _on(1, 2.0)
    src = HostEnv({key(x): v}, {key(x): "b"})
    env = HostEnv()
    env.wire([Wire(X, x, s), Wire(Y, value=np.int32(4))], src)
    assert env.vals[X] is v and env.where[X] == "b"
    assert env.vals[Y] == 4 and env.where[Y] is None


def test_where_of_places_only_device_values_on_a_device() -> None:
    """A value lives on the device it was made on only if it holds JAX arrays; numpy values, ``DEAD``,
    handles and values made on no device are known on the host (they are constants of a trace)."""
    assert where_of(_on(0, 1.0), "a") == "a"
    assert where_of((_on(0, 1.0), _on(0, 2.0)), "a") == "a"
    assert where_of(_on(0, 1.0), None) is None
    for v in (np.float32(1.0), np.zeros(2), DEAD, Handle("var", "v")):
        assert where_of(v, "a") is None


def test_a_lazy_output_is_the_calls_value_or_dead_where_the_call_made_none() -> None:
    """A threaded run's output (``Lazy``, not a live flag by default) is what the segment call gave
    under its own key, once the call returned; a key the call did not give is ``DEAD``."""
    fut = _done({X: 1.5, Y: 2.5}, {X: False})
    assert Lazy(fut, X).get() == 1.5 and Lazy(fut, Y).get() == 2.5
    assert Lazy(_done({Y: 2.5}), X).get() is DEAD


def test_a_lazy_deadness_marker_absent_from_the_call_means_the_node_fired_live() -> None:
    """A node's deadness marker (output slot ``-1``) that the call did not give reads as absent
    (``None``: the node fired live), not as ``DEAD``; one the call gave is read as it is."""
    assert Lazy(_done({X: 1.0}), MARK).get() is None
    assert Lazy(_done({MARK: DEAD, X: 1.0}), MARK).get() is DEAD
    assert Lazy(_done({MARK: DEAD}), X).get() is DEAD  # (a data output is not a marker)


def test_a_lazy_live_flag_is_the_calls_flag_for_its_key() -> None:
    """``Lazy(..., live=True)`` reads the call's live flag of its key, not its value; a key with no
    flag is live."""
    fut = _done({X: 1.0, Y: 2.0}, {X: False, Y: True})
    assert Lazy(fut, X, live=True).get() is False and Lazy(fut, Y, live=True).get() is True
    assert Lazy(_done({X: 1.0}), X, live=True).get() is True


def test_a_lazy_output_is_plain_data_only_when_the_host_marks_it_so() -> None:
    """A segment's output is a constant of the next trace where it is known at trace time; only a
    loop variable entering an iteration is marked ``data`` (``host_control``), to enter as a device
    value. So a ``Lazy`` made without the mark is not data, and keeps the future and the key."""
    fut = _done({X: 1.0})
    lz = Lazy(fut, X)
    assert (lz.fut, lz.k, lz.live, lz.data) == (fut, X, False, False)
    assert Lazy(fut, X, data=True).data is True


def test_resolved_waits_for_a_lazy_value_and_passes_any_other_through() -> None:
    """``resolved`` is the value a ``Lazy`` stands for, and any other value itself."""
    v = np.float32(3.0)
    assert resolved(Lazy(_done({X: v}), X)) is v and resolved(v) is v and resolved(DEAD) is DEAD


def test_an_abstract_value_keeps_shape_and_dtype_of_each_array_and_every_constant() -> None:
    """``abstract`` (a trace that runs nothing): each JAX array becomes its ``ShapeDtypeStruct``,
    leaf by leaf in a pytree, a ``Lazy`` is waited for first, and constants (numpy, ``DEAD``,
    handles) stay as they are, so the trace folds them as a run would."""
    arr = jax.numpy.zeros((2, 3), dtype=jax.numpy.int32)
    got = abstract(arr)
    assert isinstance(got, jax.ShapeDtypeStruct) and got.shape == (2, 3) and got.dtype == np.int32
    const, handle = np.arange(3.0), Handle("var", "v")
    tree = abstract({"a": (arr, const), "b": DEAD, "c": handle})
    assert isinstance(tree["a"][0], jax.ShapeDtypeStruct) and tree["a"][0].shape == (2, 3)
    # (a handle is a leafless pytree node: rebuilt from its fields, equal to what it was)
    assert tree["a"][1] is const and tree["b"] is DEAD and tree["c"] == handle
    lazy = abstract(Lazy(_done({X: arr}), X))
    assert isinstance(lazy, jax.ShapeDtypeStruct) and lazy.shape == (2, 3) and lazy.dtype == np.int32


def _fetch_graph() -> tuple[Any, Any]:
    """Two tensors to fetch: ``a`` and ``b`` (placeholders)."""
    g = tn.Graph()
    with g.as_default():
        a = tn.placeholder(tn.float32, [], name="a")
        b = tn.placeholder(tn.float32, [2], name="b")
    return a, b


def test_fetched_values_come_to_the_host_in_the_fetches_order() -> None:
    """``fetched``: each fetch's value, waited for where it is a ``Lazy`` and brought to the host
    (numpy), in the order of the fetches, with live flags read as truth (a device ``True`` too)."""
    a, b = _fetch_graph()
    vals = {key(a): _on(0, 1.5), key(b): Lazy(_done({key(b): np.array([1.0, 2.0])}), key(b))}
    lives = {key(a): jax.numpy.bool_(True), key(b): Lazy(_done({}, {key(b): np.True_}), key(b), live=True)}
    got = fetched([b, a], vals, lives)
    assert isinstance(got[1], np.ndarray) and float(got[1]) == 1.5
    np.testing.assert_array_equal(got[0], [1.0, 2.0])
    assert fetched([], vals, lives) == []


def test_a_dead_fetch_raises_naming_the_tensor_whether_dead_or_flagged_dead() -> None:
    """A fetch whose value is ``DEAD`` or absent from the environment, or whose live flag (waited
    for where it is a ``Lazy``) is false, raises ``DeadFetchError`` with the one message every
    backend gives, naming the tensor."""
    a, b = _fetch_graph()
    with pytest.raises(DeadFetchError, match=r"fetched tensor a:0 is dead: Placeholder node \"a\""):
        fetched([a], {key(a): DEAD}, {})
    with pytest.raises(DeadFetchError, match=r"fetched tensor b:0 is dead"):
        fetched([a, b], {key(a): 1.0}, {})
    flagged = Lazy(_done({}, {key(b): False}), key(b), live=True)
    with pytest.raises(DeadFetchError, match=r"fetched tensor b:0 is dead"):
        fetched([a, b], {key(a): 1.0, key(b): np.zeros(2)}, {key(b): flagged})
    with pytest.raises(DeadFetchError, match=r"fetched tensor a:0 is dead"):
        fetched([a], {key(a): 1.0}, {key(a): np.False_})
