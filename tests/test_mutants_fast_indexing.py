"""Laws of one slot of a buffer (``turnout.fast.indexing``): ``slot(x, j)`` is ``x[j]`` and
``put(x, j, v)`` is ``x`` with ``x[j] = v``, along the first axis, for an index in range, whatever its
kind (a Python int, a NumPy integer, a traced value, under 32- or 64-bit JAX); a ``place`` move is
taken by the slice first (``slot``) or by the update last (``put``); and a traced index is not
wrapped (no compare and select in the program: the callers proved it in range). Each law kills
mutants of the full set of ``fast/indexing.py`` (issue 40, part 3; ``python tools/mutation.py
--module fast/indexing.py --all``): a slice of the wrong size or start, a squeeze or reshape of the
wrong axis, a place move skipped or taken twice, the static path taken for a traced index, the
no-wrap option lost or inverted.

Each test calls the two functions directly on small buffers and reads JAX's own program
(``jax.make_jaxpr``) for the no-wrap law; the expected values are NumPy's indexing.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from turnout.fast import indexing
from turnout.fast.indexing import put, slot

#: buffers of rank 1, 2 and 3 (the first axis is the slots), distinct values everywhere
BUFFERS = [np.arange(5, dtype=np.float32), np.arange(12, dtype=np.float32).reshape(4, 3) * 1.5,
           np.arange(24, dtype=np.int32).reshape(3, 2, 4)]


def _indices(n: int) -> Iterator[Any]:
    """Every index 0..n-1 of a buffer of n slots, as a Python int and as a NumPy int32 and int64."""
    for j in range(n):
        yield from (j, np.int32(j), np.int64(j))


@pytest.mark.parametrize("x64", [False, True])
@pytest.mark.parametrize("b", range(len(BUFFERS)))
def test_slot_is_the_slice_at_j_for_every_kind_of_index(b: int, x64: bool) -> None:
    """``slot(x, j) == x[j]`` (shape and dtype included) for every in-range j, given as a Python int, a
    NumPy integer or a traced value (under ``jit``), under JAX's 32-bit default and under
    ``enable_x64`` (how the fast backend traces). Kills the slice size, its start on the other axes,
    the index's cast and the squeezed axis mutated."""
    x = BUFFERS[b]
    traced = jax.jit(lambda a, j: slot(a, j))
    with jax.enable_x64(x64):
        for j in _indices(len(x)):
            for got in (slot(jnp.asarray(x), j), traced(jnp.asarray(x), np.int32(j))):
                assert got.shape == x[int(j)].shape and got.dtype == x.dtype
                np.testing.assert_array_equal(np.asarray(got), x[int(j)])


@pytest.mark.parametrize("x64", [False, True])
@pytest.mark.parametrize("b", range(len(BUFFERS)))
def test_put_sets_the_slot_at_j_and_nothing_else(b: int, x64: bool) -> None:
    """``put(x, j, v)`` is ``x`` with slot j set to ``v`` (cast to ``x``'s dtype, from Python floats
    or a float array), every other slot unchanged, for every kind of in-range index as ``slot``. Kills the
    update's shape, dtype, start and the index's cast mutated."""
    x = BUFFERS[b]
    v = (np.arange(int(np.prod(x.shape[1:])), dtype=np.float64) + 100.0).reshape(x.shape[1:])
    traced = jax.jit(lambda a, j, u: put(a, j, u))
    with jax.enable_x64(x64):
        for j in _indices(len(x)):
            want = x.copy()
            want[int(j)] = v
            # (the static path's ``.at[j].set`` is given x's dtype: JAX warns on an unsafe cast there)
            for got in (put(jnp.asarray(x), j, v.astype(x.dtype) if isinstance(j, int) else v.tolist()),
                        traced(jnp.asarray(x), np.int32(j), jnp.asarray(v))):
                assert got.shape == x.shape and got.dtype == x.dtype
                np.testing.assert_array_equal(np.asarray(got), want)


def _recording(calls: list[tuple[int, ...]]) -> Callable[[Any], Any]:
    """A stand-in ``place`` move: records the shape it is given and multiplies by 10, so a result
    shows whether the move was taken, once."""

    def place(a: Any) -> Any:
        calls.append(tuple(jnp.shape(a)))
        return a * 10

    return place


@pytest.mark.parametrize("index", [1, np.int32(1)])
def test_a_place_move_is_taken_once_by_the_slice_and_by_the_update(index: Any) -> None:
    """With ``place``, ``slot`` moves the one-slot slice (shape ``(1, ...)``) before squeezing it, and
    ``put`` moves the one-slot update before writing it, once each, also for a Python int index
    (the static path would skip the move). Kills the static path taken whenever the index is an int
    (``or``), the move skipped or taken where there is none, and the slice squeezed before it."""
    x = jnp.asarray(BUFFERS[1])
    calls: list[tuple[int, ...]] = []
    np.testing.assert_array_equal(np.asarray(slot(x, index, _recording(calls))), BUFFERS[1][1] * 10)
    assert calls == [(1, 3)]
    calls.clear()
    want = BUFFERS[1].copy()
    want[1] = [70.0, 80.0, 90.0]
    np.testing.assert_array_equal(np.asarray(put(x, index, [7.0, 8.0, 9.0], _recording(calls))), want)
    assert calls == [(1, 3)]


def _primitives(fn: Callable[..., Any], *args: Any) -> list[str]:
    """The primitives of JAX's program for ``fn(*args)``, the index traced."""
    return [e.primitive.name for e in jax.make_jaxpr(fn)(*args).jaxpr.eqns]


@pytest.mark.skipif("allow_negative_indices" not in inspect.signature(jax.lax.dynamic_slice).parameters,
                    reason="this JAX wraps every dynamic index")
def test_a_traced_index_is_used_as_it_is_without_a_wrap() -> None:
    """The module's reason to exist: a traced index is passed to ``dynamic_slice`` and
    ``dynamic_update_slice`` as it is, told that it is not negative, so the program holds no compare
    and select that would wrap it (``jnp`` indexing and the ``lax`` defaults add both to every loop
    body that indexes). Kills the no-wrap option lost, inverted or misspelt, its test negated, the
    static path (``x[j]``) taken for a traced index."""
    x = jnp.asarray(BUFFERS[1])
    for prims in (_primitives(lambda a, j: slot(a, j), x, 1),
                  _primitives(lambda a, j: put(a, j, jnp.zeros(3, a.dtype)), x, 1)):
        assert not {"lt", "select_n", "gather", "scatter"} & set(prims), prims
    assert "dynamic_slice" in _primitives(lambda a, j: slot(a, j), x, 1)
    assert "dynamic_update_slice" in _primitives(lambda a, j: put(a, j, jnp.zeros(3, a.dtype)), x, 1)
    assert indexing._NO_WRAP == indexing._NO_WRAP_UPDATE == {"allow_negative_indices": False}


def test_a_python_int_index_is_indexed_statically() -> None:
    """For a Python int (no ``place``), ``slot`` and ``put`` are JAX's own static indexing, ``x[j]`` and
    ``x.at[j].set(v)``: the same program, a slot known when it is built. Kills the static path
    refused to an int without a move (``place is not None``)."""
    x = jnp.asarray(BUFFERS[1])
    v = jnp.zeros(3, x.dtype)
    assert _primitives(lambda a: slot(a, 2), x) == _primitives(lambda a: a[2], x)
    assert _primitives(lambda a: put(a, 2, v), x) == _primitives(lambda a: a.at[2].set(v), x)
    assert "dynamic_slice" not in _primitives(lambda a: slot(a, 2), x)


def test_no_wrap_is_asked_only_of_a_function_that_takes_the_option() -> None:
    """``_no_wrap(fn)`` gives the option only where ``fn`` has a parameter of that name, and nothing
    where it has none or its signature cannot be read (not a callable; a builtin without a text
    signature, as under Sphinx's autodoc). Kills the parameter test negated or misspelt and the
    exceptions not caught."""

    def takes(a: Any, allow_negative_indices: bool = True) -> None:
        return None

    def lacks(a: Any) -> None:
        return None

    assert indexing._no_wrap(takes) == {"allow_negative_indices": False}
    assert indexing._no_wrap(lacks) == {}
    assert indexing._no_wrap(None) == {}  # type: ignore[arg-type]  # a TypeError inside
    assert indexing._no_wrap(_Unreadable()) == {}  # a ValueError inside


class _Unreadable:
    """A callable whose signature cannot be read: ``inspect.signature`` raises ValueError, as for a
    builtin without a text signature."""

    @property
    def __signature__(self) -> Any:
        raise ValueError("no signature")

    def __call__(self, a: Any) -> Any:
        return a
