"""A ``jax.Array`` fed to the fast backend goes to it as it is, not through a host copy.

Why a file of its own: the session used to read every fed array through ``np.asarray``. On the CPU
that is a view, but on a GPU it is a copy of the whole array to the host, and the backend then copied
it back: for the benchmark LSTM (a 65 MB padded sequence fed as a ``jax.Array``) that was most of a
step's time on an H100. Now a device array of exactly the tensor's dtype is checked by its signature
and passed through (``Session._check_feed``, ``FastBackend.device_feed``); anything else still
takes the numpy path with its per-value checks, and the reference fallback still gets numpy.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

import turnout as tn

jax = pytest.importorskip("jax")


def _affine() -> tuple[tn.Graph, tn.Tensor, tn.Tensor]:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [None, 3], name="x")
        y = tn.reduce_sum(x * 2.0 + 1.0, axis=1)
    return g, x, y


def _spy(sess: tn.Session) -> list[dict[Any, Any]]:
    """The feeds each run hands the backend."""
    seen: list[dict[Any, Any]] = []
    run = sess.backend.run

    def spy(fetches: Any, feeds: dict[Any, Any], variables: Any, options: Any) -> Any:
        seen.append(dict(feeds))
        return run(fetches, feeds, variables, options)

    sess.backend.run = spy  # type: ignore[method-assign]
    return seen


def test_a_device_array_of_the_tensors_dtype_reaches_the_backend_as_it_is() -> None:
    g, x, y = _affine()
    sess = tn.Session(g, backend="fast")
    seen = _spy(sess)
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    dev = jax.device_put(a)
    for _ in range(3):  # the first signature is checked in full, the repeats by their signature
        np.testing.assert_allclose(sess.run(y, {x: dev}), (a * 2 + 1).sum(axis=1))
    assert all(isinstance(f[x], jax.Array) for f in seen)
    np.testing.assert_allclose(sess.run(y, {x: a}), tn.Session(g).run(y, {x: a}))
    assert isinstance(seen[-1][x], np.ndarray)  # numpy feeds are unchanged


def test_a_device_array_is_checked_like_a_numpy_one() -> None:
    """The same FeedErrors as for the numpy array, for a new shape and for a repeated one."""
    g, x, y = _affine()
    for backend in ("reference", "fast"):
        sess = tn.Session(g, backend=backend)
        for _ in range(2):
            with pytest.raises(tn.FeedError, match="shape"):
                sess.run(y, {x: jax.device_put(np.zeros((2, 4), np.float32))})
    with g.as_default():
        k = tn.placeholder(tn.int32, [], name="k")
        z = k + 1
    for backend in ("reference", "fast"):
        sess = tn.Session(g, backend=backend)
        with pytest.raises(tn.FeedError, match="floating"):
            sess.run(z, {k: jax.device_put(np.float32(1.5))})


def test_a_device_array_of_another_dtype_is_converted_as_numpy_is() -> None:
    """An int32 device array fed to a float32 tensor takes the numpy path (converted on the host)."""
    g, x, y = _affine()
    sess = tn.Session(g, backend="fast")
    seen = _spy(sess)
    a = np.arange(6, dtype=np.int32).reshape(2, 3)
    np.testing.assert_allclose(sess.run(y, {x: jax.device_put(a)}), (a * 2 + 1).sum(axis=1))
    assert isinstance(seen[-1][x], np.ndarray) and seen[-1][x].dtype == np.float32


def test_a_device_array_on_another_device_is_placed_with_the_backends_own_arrays() -> None:
    """A feed committed to another device than the Variables' is moved to theirs: a compiled call
    cannot take arrays committed to two devices. The other device is one of the host devices the
    test suite asks XLA for (``tests/conftest.py``), so there is one on a GPU machine too."""
    home = next(iter(jax.device_put(np.zeros(())).devices()))
    other = next((d for d in [*jax.devices(), *jax.devices("cpu")] if d != home), None)
    assert other is not None, "tests/conftest.py asks XLA for 8 host devices"
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [3], name="x")
        v = tn.Variable(np.ones(3, np.float32), name="v")
        y = v.read() * x
    sess = tn.Session(g, backend="fast")
    seen = _spy(sess)
    a = np.arange(3, dtype=np.float32)
    for _ in range(2):
        np.testing.assert_allclose(sess.run(y, {x: jax.device_put(a, other)}), a)
        assert seen[-1][x].devices() == {home}


def test_a_program_that_falls_back_reads_device_feeds_on_the_host() -> None:
    """The reference interpreter (the fallback of a program that cannot be compiled) gets numpy."""
    g = tn.Graph()
    with g.as_default():
        w = tn.placeholder(tn.float32, [], name="w")
        # (a loop variable that changes shape, for as many iterations as w decides: not compiled)
        _, x = tn.while_loop(lambda i, x: tn.reduce_sum(x) < 20.0, lambda i, x: (i + 1, tn.concat([x, x * w], 0)),
                             [tn.constant(0), tn.reshape(w, [1])], shape_invariants=[[], [None]])
    sess = tn.Session(g, backend="fast")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        got = sess.run(x, {w: jax.device_put(np.float32(2.0))})
    np.testing.assert_allclose(got, tn.Session(g).run(x, {w: np.float32(2.0)}))
    assert sess.last_result.stats["executor"] == "reference interpreter (fallback)"


def test_a_gradient_step_fed_a_device_sequence_matches_the_reference() -> None:
    """The fused attempt (gradient stacks) fed a device array, run twice (the hot route)."""
    g = tn.Graph()
    with g.as_default():
        xs = tn.placeholder(tn.float32, [5, 2], name="xs")
        n = tn.placeholder(tn.int32, [], name="n")
        w = tn.Variable(np.full(2, 0.5, np.float32), name="w")
        wr = w.read()
        _, h = tn.while_loop(lambda i, h: i < n, lambda i, h: (i + 1, tn.tanh(h * wr + xs[i])),
                             [tn.constant(0), tn.zeros([2], tn.float32)])
        (dw,) = tn.gradients(tn.reduce_sum(h), [wr])
    seq = np.linspace(-1, 1, 10, dtype=np.float32).reshape(5, 2)
    sess = tn.Session(g, backend="fast")
    want = tn.Session(g).run(dw, {xs: seq, n: 4})
    for _ in range(2):
        np.testing.assert_allclose(sess.run(dw, {xs: jax.device_put(seq), n: 4}), want, rtol=1e-5)


def test_an_array_like_of_another_library_still_goes_through_numpy() -> None:
    """Only JAX's arrays are passed through: any other object with ``__array__`` and a numpy dtype is
    read on the host and checked as numpy is, so the backend never sees an object it cannot call with."""

    class Wrapped:
        def __init__(self, a: np.ndarray) -> None:
            self.a, self.dtype, self.shape = a, a.dtype, a.shape

        def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
            return self.a if dtype is None else self.a.astype(dtype)

    g, x, y = _affine()
    sess = tn.Session(g, backend="fast")
    seen = _spy(sess)
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    for _ in range(2):
        np.testing.assert_allclose(sess.run(y, {x: Wrapped(a)}), (a * 2 + 1).sum(axis=1))
        assert isinstance(seen[-1][x], np.ndarray)
