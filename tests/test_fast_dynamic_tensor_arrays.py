"""TensorArrays of dynamic size on the fast backend: compiled, with the interpreters' values and errors.

A dynamic TensorArray (``dynamic_size=True``, a decoder's outputs) is a buffer of the run's capacity
and a run-time length; a write past the capacity runs the program again with twice the capacity.
Its stack has a shape only the run knows: fetched, the host cuts it to its length; read by another
op, the run is cut there (``fast.specialise``): a run that fetches the stack first, then the program
with it fed. Each case runs with ``fallback=False``, so an interpreter fallback fails it.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from programs import assert_same_outcome

import turnout as tn
from turnout.errors import KernelError, UnsupportedError


def _decoder(limit: Any = None, element_shape: Any = None) -> tuple[tn.Graph, dict[str, Any]]:
    """A loop of data-dependent length (doubling ``x`` while below ``limit``) writing each value to a
    dynamic TensorArray, and what is made of it."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [2], name="x")
        lim = tn.placeholder(tn.float32, [], name="lim") if limit is None else tn.constant(limit)
        ta = tn.TensorArray(tn.float32, size=0, dynamic_size=True, element_shape=element_shape)

        def body(i: Any, v: Any, ta: Any) -> Any:
            return i + 1, v * 2.0, ta.write(i, v)

        n, v, ta = tn.while_loop(lambda i, v, ta: tn.reduce_max(v) < lim, body, [tn.constant(0), x, ta])
        out = ta.stack()
    return g, {"x": x, "lim": lim, "n": n, "v": v, "ta": ta, "out": out, "size": ta.size()}


def _both(g: tn.Graph, fetches: list[Any], feeds: dict[Any, Any], **fast: Any) -> tuple[list[Any], dict[str, Any]]:
    """The fast backend's values (compiled: no fallback) checked against the reference's, and its stats."""
    want = tn.Session(g).run(fetches, feeds)
    sess = tn.Session(g, backend="fast", fallback=False, **fast)
    got = sess.run(fetches, feeds)
    assert sess.last_result is not None
    stats = sess.last_result.stats
    assert stats["executor"] == "compiled"
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    return got, stats


@pytest.mark.parametrize("lim", [1.0, 1.5, 3.0, 100.0])
def test_a_fetched_stack_has_the_loop_s_length(lim: float) -> None:
    g, t = _decoder(element_shape=[2])  # (with no writes, the stack of an array of no element shape fails)
    got, stats = _both(g, [t["out"], t["size"], t["n"]], {t["x"]: np.array([1.0, 0.5], np.float32), t["lim"]: lim})
    assert got[0].shape == (int(got[2]), 2) and int(got[1]) == int(got[2])
    assert "cut_at" not in stats  # (fetched, not read by another op: nothing to cut)


def test_an_op_reading_the_stack_cuts_the_run_there() -> None:
    g, t = _decoder()
    with g.as_default():
        total = tn.reduce_sum(t["out"] * 2.0) + tn.reduce_sum(t["v"])
        rows = tn.transpose(t["out"])
    sess = None
    for lim in (3.0, 40.0, 3.0):  # (a length seen before reuses its plan)
        feeds = {t["x"]: np.array([1.0, 0.5], np.float32), t["lim"]: lim}
        got, stats = _both(g, [total, rows], feeds)
        assert stats["cut_at"] == [t["out"].name]
        sess = sess or tn.Session(g, backend="fast", fallback=False)
        np.testing.assert_allclose(sess.run(total, feeds), got[0], rtol=1e-6)
    # the schedule of a later run says where it is cut (an earlier run learnt it)
    assert sess is not None
    (note,) = sess.explain(total, feeds).notes
    assert note.startswith(f"cut at {t['out'].name}, ")


def test_writes_past_the_capacity_run_again_with_twice_the_capacity() -> None:
    g, t = _decoder()
    feeds = {t["x"]: np.array([1.0, 0.5], np.float32), t["lim"]: 2.0 ** 10}
    got, stats = _both(g, [t["out"]], feeds, stack_chunk=4)
    assert got[0].shape == (10, 2)
    assert stats["stack_capacity_retries"] == 2  # 4 -> 8 -> 16 entries


def test_a_dynamic_array_starts_at_its_size_and_grows_past_it() -> None:
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")
        ta = tn.TensorArray(tn.int32, size=3, dynamic_size=True)
        ta = ta.write(0, tn.constant(7))
        ta = tn.while_loop(lambda i, ta: i < n, lambda i, ta: (i + 1, ta.write(i, i * i)), [tn.constant(1), ta])[1]
        size = ta.size()
        second = ta.read(1)
        out = ta.stack()
    for k in (2, 3, 6):
        got, _ = _both(g, [size, second] if k < 3 else [size, second, out], {n: k})
        assert int(got[0]) == max(3, k)
    # two writes leave slot 2 of the three unwritten: its stack fails, as on the interpreters
    with pytest.raises(KernelError, match="never written"):
        tn.Session(g).run(out, {n: 2})
    with pytest.raises(KernelError, match="never written"):
        tn.Session(g, backend="fast", fallback=False).run(out, {n: 2})


def test_reads_inside_the_loop_see_earlier_writes() -> None:
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")
        ta = tn.TensorArray(tn.float32, size=0, dynamic_size=True, element_shape=[]).write(0, tn.constant(1.0))

        def body(i: Any, ta: Any) -> Any:
            return i + 1, ta.write(i, ta.read(i - 1) * 3.0)

        _, ta = tn.while_loop(lambda i, ta: i < n, body, [tn.constant(1), ta])
        out = ta.stack()
    got, _ = _both(g, [out], {n: 5})
    np.testing.assert_allclose(got[0], [1, 3, 9, 27, 81])


@pytest.mark.parametrize("case", ["read past the length", "write twice", "negative write", "unwritten slot"])
def test_mistakes_fail_as_on_the_interpreters(case: str) -> None:
    g = tn.Graph()
    with g.as_default():
        k = tn.placeholder(tn.int32, [], name="k")
        ta = tn.TensorArray(tn.float32, size=0, dynamic_size=True).write(0, tn.constant([1.0]))
        if case == "read past the length":
            out = ta.read(k)
        elif case == "write twice":
            out = ta.write(k, tn.constant([2.0])).stack()
        elif case == "negative write":
            out = ta.write(-k, tn.constant([2.0])).stack()
        else:
            out = ta.write(k + 1, tn.constant([2.0])).stack()
    with pytest.raises(KernelError):
        tn.Session(g).run(out, {k: 1 if case != "write twice" else 0})
    with pytest.raises(KernelError):
        tn.Session(g, backend="fast", fallback=False).run(out, {k: 1 if case != "write twice" else 0})


def test_the_gradient_through_a_dynamic_array_is_compiled() -> None:
    g, t = _decoder(limit=5.0)
    with g.as_default():
        loss = tn.reduce_sum(t["out"] * t["out"]) + tn.reduce_sum(t["v"])
        (dx,) = tn.gradients(loss, [t["x"]])
    _, stats = _both(g, [loss, dx], {t["x"]: np.array([1.0, 0.5], np.float32)})
    assert stats["cut_at"] == [t["out"].name]


def test_a_cut_behind_a_variable_write_is_refused() -> None:
    """Cut in two, the run would write the Variable twice: the program is not compiled."""
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")
        v = tn.Variable(np.float32(1.0), name="v")
        up = v.assign_add(1.0)
        ta = tn.TensorArray(tn.float32, size=0, dynamic_size=True)
        with tn.control_dependencies([up]):
            start = v.read()
        ta = tn.while_loop(lambda i, ta: i < n, lambda i, ta: (i + 1, ta.write(i, start)), [tn.constant(0), ta])[1]
        out = tn.reduce_sum(ta.stack())
    with pytest.raises(UnsupportedError, match="writes a Variable"):
        tn.Session(g, backend="fast", fallback=False).run(out, {n: 3})
    ref = tn.Session(g)
    fast = tn.Session(g, backend="fast")
    with pytest.warns(RuntimeWarning, match="writes a Variable"):
        assert float(fast.run(out, {n: 3})) == float(ref.run(out, {n: 3})) == 6.0


def test_a_stack_read_inside_a_loop_is_not_compiled() -> None:
    g, t = _decoder(limit=5.0)
    with g.as_default():
        r = tn.while_loop(lambda j, s: j < 2, lambda j, s: (j + 1, s + tn.reduce_sum(t["out"])),
                          [tn.constant(0), tn.constant(0.0)])[1]
    feeds = {t["x"]: np.array([1.0, 0.5], np.float32)}
    with pytest.raises(UnsupportedError, match="inside a loop or a branch"):
        tn.Session(g, backend="fast", fallback=False).run(r, feeds)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        np.testing.assert_allclose(tn.Session(g, backend="fast").run(r, feeds), tn.Session(g).run(r, feeds))


def test_a_fetched_dynamic_array_is_the_interpreters_value() -> None:
    g, t = _decoder(limit=5.0)
    feeds = {t["x"]: np.array([1.0, 0.5], np.float32)}
    want = tn.Session(g).run(t["ta"], feeds)
    got = tn.Session(g, backend="fast", fallback=False).run(t["ta"], feeds)
    assert got.size == want.size and got.dynamic == want.dynamic
    for a, b in zip(got.items, want.items, strict=True):
        np.testing.assert_allclose(a, b)


def test_on_two_devices() -> None:
    """The fast partitioned executor cuts the run as the one-device backend does."""
    g, t = _decoder()
    with g.as_default(), tn.device("cpu:1"):
        total = tn.reduce_sum(t["out"]) * 2.0
    feeds = {t["x"]: np.array([1.0, 0.5], np.float32), t["lim"]: 9.0}
    want = tn.Session(g).run([total, t["out"]], feeds)
    sess = tn.Session(g, backend="fast", devices=["cpu:0", "cpu:1"], fallback=False)
    got = sess.run([total, t["out"]], feeds)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b)
    assert sess.last_result is not None and sess.last_result.stats["cut_at"] == [t["out"].name]


def test_a_loop_spanning_two_devices_grows_its_array() -> None:
    """The host drives a loop whose body spans two devices; the array outgrows its capacity there
    and the run goes again with twice the capacity, as on one device."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [2], name="x")
        ta = tn.TensorArray(tn.float32, size=0, dynamic_size=True)

        def body(i: Any, v: Any, ta: Any) -> Any:
            with tn.device("cpu:1"):
                w = v * 2.0
            return i + 1, w, ta.write(i, v)

        n, _, ta = tn.while_loop(lambda i, v, ta: tn.reduce_max(v) < 100.0, body, [tn.constant(0), x, ta])
        out = ta.stack()
    feeds = {x: np.array([1.0, 0.5], np.float32)}
    want = tn.Session(g).run([out, n], feeds)
    sess = tn.Session(g, backend="fast", devices=["cpu:0", "cpu:1"], fallback=False, stack_chunk=2)
    got = sess.run([out, n], feeds)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)
    assert sess.last_result is not None and sess.last_result.stats["stack_capacity_retries"] == 2


# a quarter of the loaded profile's budget: each example compiles a program (the default run's time)
@settings(deadline=None, max_examples=max(1, settings.default.max_examples // 4))
@given(n=st.integers(0, 9), start=st.integers(0, 3), stride=st.sampled_from([1, 2]),
       chunk=st.sampled_from([1, 3, 1024]), use=st.sampled_from(["fetch", "reduce", "gradient", "size", "read"]),
       declared=st.booleans(), where=st.sampled_from(["body", "inner loop", "branch"]))
def test_generated_dynamic_arrays_agree_with_the_reference(n: int, start: int, stride: int, chunk: int, use: str,
                                                           declared: bool, where: str) -> None:
    _check_generated(n, start, stride, chunk, use, declared, where)


def test_an_empty_array_of_no_declared_element_shape_is_not_stacked_after_a_loop_of_no_body() -> None:
    """Found by the property below: the loop gives the array its writes' element shape, which the
    interpreters, having seen no write, do not know: its stack fails there, and must here."""
    _check_generated(0, 0, 1, 1, "fetch", False, "body")


def test_an_array_keeps_its_size_through_a_nested_loop_of_no_body() -> None:
    """Found by the property below: an array entering a loop with no element shape was given its
    buffer with a length of 0, not its own (``tracing.reconcile``)."""
    _check_generated(0, 1, 1, 1, "size", False, "inner loop")


def _check_generated(n: int, start: int, stride: int, chunk: int, use: str, declared: bool, where: str) -> None:
    """A loop of fed length writes slot ``stride * i`` of a dynamic array of initial size ``start``
    (a stride of 2 leaves slots unwritten: its stack fails) in its body, in a loop of one body
    nested in it, or in the branch of a cond taken where ``i`` is not 1 (slot 1 is left unwritten),
    under a capacity of ``chunk`` entries; and the array's stack is fetched, reduced,
    differentiated, its size or a slot read: the fast backend (compiled) gives the reference's
    values or its error type."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [2], name="x")
        k = tn.placeholder(tn.int32, [], name="k")
        ta = tn.TensorArray(tn.float32, size=start, dynamic_size=True, element_shape=[2] if declared else None)

        def write(i: Any, v: Any, ta: Any) -> Any:
            if where == "inner loop":
                return tn.while_loop(lambda j, ta: j < 1, lambda j, ta: (j + 1, ta.write(i * stride + j, v * v)),
                                     [tn.constant(0), ta])[1]
            if where == "branch":
                return tn.cond(tn.not_equal(i, 1), lambda: ta.write(i * stride, v * v), lambda: ta)
            return ta.write(i * stride, v * v)

        def body(i: Any, v: Any, ta: Any) -> Any:
            v = tn.tanh(v * x + tn.cast(i, tn.float32) * 0.1)
            return i + 1, v, write(i, v, ta)

        _, v, ta = tn.while_loop(lambda i, v, ta: i < k, body, [tn.constant(0), x, ta])
        out = ta.stack()
        loss = tn.reduce_sum(out) + tn.reduce_sum(v)
        fetches = {"fetch": [out], "reduce": [loss], "gradient": [loss, *tn.gradients(loss, [x])],
                   "size": [ta.size()], "read": [ta.read(tn.maximum(ta.size() - 1, 0))]}[use]
    feeds = {x: np.array([0.5, -1.0], np.float32), k: n}
    assert_same_outcome(lambda: tn.Session(g).run(fetches, feeds),
                        lambda: tn.Session(g, backend="fast", fallback=False, stack_chunk=chunk).run(fetches, feeds),
                        f"n={n} start={start} stride={stride} chunk={chunk} use={use} declared={declared} "
                        f"where={where}")
