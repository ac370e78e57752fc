"""Laws of the fast backend's run-time values that are not plain arrays (``turnout.fast.values``):
the dead value, a TensorArray (its fields, size, new slots, first buffer and allocation guard, and
its pytree parts), the stack of a dynamic one, handles, static values and what a fetch hands the
host. Each law kills mutants of the full set of ``fast/values.py`` (issue 40, part 3; ``python
tools/mutation.py --module fast/values.py --all``).

The values are made and taken apart directly (small numpy and JAX arrays, no program compiled), so
the file takes about a second after JAX's import. The programs that make and fetch TensorArrays on
the fast backend are in ``test_fast_dynamic_tensor_arrays.py`` and
``test_fast_tensor_array_inplace.py``.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import turnout as tn
from turnout.errors import ResourceExhaustedError, describe_node
from turnout.fast.values import (
    DEAD,
    TA,
    Handle,
    Stacked,
    Static,
    _Dead,
    to_host,
    wrap_static,
)
from turnout.limits import allocation_limit


# ---- DEAD ---------------------------------------------------------------------------------------------------
def test_the_dead_value_is_one_leafless_pytree_that_rebuilds_as_itself_and_shows_as_dead() -> None:
    """``DEAD`` is a ``_Dead``, equal to every other, a pytree without leaves that comes back as
    ``DEAD`` itself, and reads ``DEAD`` in messages. Kills ``DEAD`` made None and its repr changed."""
    assert isinstance(DEAD, _Dead) and DEAD == _Dead() and DEAD != 0
    leaves, tree = jax.tree_util.tree_flatten(DEAD)
    assert leaves == [] and jax.tree_util.tree_unflatten(tree, []) is DEAD
    assert repr(DEAD) == "DEAD" and repr([DEAD]) == "[DEAD]"


def _named_node() -> Any:
    """A node for the guard's refusal to name."""
    g = tn.Graph()
    with g.as_default():
        return tn.constant(np.int32(3), name="ta_size").node


# ---- TensorArrays ---------------------------------------------------------------------------------------------
def test_a_new_tensor_array_keeps_what_it_is_given_and_knows_no_slot_written_unless_told() -> None:
    """``TA(...)``: its size, dtype (as a numpy dtype), element shape, buffer, mask, length, ``full`` and
    ``written`` as given; made without them it is pending, of static size, not known full, with its
    written slots unknown. Kills ``full`` defaulting to true, the fields made None, the dtype read
    from None, and ``length``, ``full`` or ``written`` dropped."""
    ta = TA(3, "int32", (2,))
    assert (ta.size, ta.dtype, ta.elem_shape) == (3, np.dtype(np.int32), (2,))
    assert ta.pending and not ta.dynamic and ta.full is False and ta.written is None and ta.length is None
    buf, mask, length = np.zeros((3, 2), np.int32), np.zeros(3, np.int8), np.int32(1)
    told = TA(3, np.int32, (2,), buf, mask, full=True, written=frozenset({1}), length=length)
    assert told.buf is buf and told.mask is mask and told.length is length
    assert told.full is True and told.written == frozenset({1}) and told.dynamic and not told.pending


def test_a_tensor_arrays_size_is_its_length_when_dynamic_else_its_static_size_as_an_int32() -> None:
    """``sized``: an int32 holding ``size`` for an array of static size, its ``length`` for a dynamic
    one. Kills the test inverted, made always or never true, and the size made None."""
    s = TA(4, np.float32, (1,)).sized()
    assert s == 4 and s.dtype == np.int32
    length = np.int32(2)
    assert TA(4, np.float32, (1,), length=length).sized() is length


def test_new_slots_keep_the_arrays_static_parts_and_its_length_unless_another_is_given() -> None:
    """``with_slots``: the same size, dtype and element shape, the new buffer, mask and written set,
    and its own length unless a new one is given. Kills every argument made None or dropped, and
    the length's choice inverted or made always or never the array's own."""
    old_length = np.int32(1)
    ta = TA(3, np.int32, (2,), np.zeros((3, 2), np.int32), np.zeros(3, np.int8), written=frozenset({0}),
            length=old_length)
    buf, mask = np.ones((3, 2), np.int32), np.ones(3, np.int8)
    new = ta.with_slots(buf, mask, written=frozenset({2}))
    assert (new.size, new.dtype, new.elem_shape) == (3, np.dtype(np.int32), (2,))
    assert new.buf is buf and new.mask is mask and new.written == frozenset({2}) and new.length is old_length
    given = np.int32(3)
    assert ta.with_slots(buf, mask, length=given).length is given
    static = TA(3, np.int32, (2,)).with_slots(buf, mask)
    assert static.length is None and not static.dynamic and static.written is None


def test_a_first_buffer_is_zeros_of_the_arrays_dtype_and_shape_with_an_int8_count_per_slot() -> None:
    """``materialize``: a buffer of zeros of shape ``(size, *elem_shape)`` in the array's dtype, a mask
    of ``size`` int8 write counts at 0, the element shape as a tuple, and the size, dtype, written
    slots and length kept. Kills every argument of the new array or of its two ``zeros`` made None
    or dropped, ``MASK_DTYPE`` made None and the element shape made None."""
    node = _named_node()
    for length in (None, np.int32(1)):
        ta = TA(3, np.int32, None, written=frozenset({1}), length=length).materialize((2, 5), node)
        assert (ta.size, ta.dtype, ta.elem_shape) == (3, np.dtype(np.int32), (2, 5))
        assert ta.buf.shape == (3, 2, 5) and ta.buf.dtype == np.int32 and not np.any(np.asarray(ta.buf))
        assert ta.mask.shape == (3,) and ta.mask.dtype == np.int8 and not np.any(np.asarray(ta.mask))
        assert ta.written == frozenset({1}) and ta.length is length


def test_the_allocation_guard_counts_a_static_arrays_whole_capacity_in_its_dtype_and_names_the_node() -> None:
    """``materialize`` of an array of static size meets ``max_tensor_bytes`` with all of its slots in
    its own dtype's size (4 bool slots of 2 fit in 8 bytes, 9 of 1 do not; a float32 array of 4 slots of 2
    does not), and the refusal names the node whose element shape it is before the guard's words.
    A dynamic array's capacity is the run's and is not checked here. Kills the dynamic test
    inverted, the guard given None or no size, shape or dtype, and the message made None or naming
    no node."""
    node = _named_node()
    with allocation_limit(8):
        TA(4, np.bool_, None).materialize((2,), node)
        with pytest.raises(ResourceExhaustedError) as e:
            TA(9, np.bool_, None).materialize((1,), node)
        assert str(e.value).startswith(f"{describe_node(node)}: TensorArray: a tensor of shape [9, 1] needs 9 bytes")
        with pytest.raises(ResourceExhaustedError, match="shape \\[4, 2\\] needs 32 bytes"):
            TA(4, np.float32, None).materialize((2,), node)
        grown = TA(64, np.bool_, None, length=np.int32(0)).materialize((2,), node)  # a dynamic array: not checked
        assert grown.buf.shape == (64, 2)


def _four() -> list[TA]:
    """A TensorArray of each kind: pending and concrete, of static and dynamic size."""
    buf, mask = jnp.arange(6, dtype=jnp.int32).reshape(3, 2), jnp.asarray([1, 0, 1], jnp.int8)
    return [TA(3, np.int32, None), TA(3, np.int32, (2,), buf, mask),
            TA(3, np.int32, None, length=jnp.int32(0)), TA(3, np.int32, (2,), buf, mask, length=jnp.int32(2))]


def test_a_tensor_arrays_pytree_children_are_its_buffer_and_mask_unless_pending_then_its_length_if_dynamic() -> None:
    """``tree_flatten``: the children are ``(buf, mask)`` for a concrete array, nothing for a pending
    one, each followed by ``length`` for a dynamic one; the static part is the size, the dtype's
    string, the element shape, whether it is dynamic and whether it is pending. Kills the parts
    made None, the pending and dynamic tests made always or never true, and the tuples subtracted."""
    pend, conc, dpend, dconc = _four()
    for ta, children in ((pend, ()), (conc, (conc.buf, conc.mask)), (dpend, (dpend.length,)),
                         (dconc, (dconc.buf, dconc.mask, dconc.length))):
        got, aux = ta.tree_flatten()
        assert len(got) == len(children) and all(a is b for a, b in zip(got, children))
        assert aux == (3, np.dtype(np.int32).str, ta.elem_shape, ta.dynamic, ta.pending)


def test_a_tensor_array_rebuilt_from_its_pytree_parts_is_the_same_array_less_what_the_trace_knew() -> None:
    """``tree_unflatten(tree_flatten())``: size, dtype, element shape, buffer, mask and length come
    back, each from its own part, for every kind of array (directly and through ``jax.tree_util``);
    ``full`` and ``written`` do not. Kills every part read from the wrong place, made None or
    dropped, and each of the three tests made always or never true."""
    for ta in _four():
        ta.full, ta.written = True, frozenset({0})
        children, aux = ta.tree_flatten()
        for back in (TA.tree_unflatten(aux, children),
                     jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(ta), jax.tree_util.tree_leaves(ta))):
            assert (back.size, back.dtype, back.elem_shape) == (ta.size, ta.dtype, ta.elem_shape)
            assert back.pending == ta.pending and back.dynamic == ta.dynamic
            assert back.buf is ta.buf and back.mask is ta.mask and back.length is ta.length
            assert back.full is False and back.written is None


def test_a_tensor_array_crosses_a_jit_boundary_with_its_slots_and_length() -> None:
    """Through ``jax.jit`` a concrete dynamic array keeps its static parts and its buffer, mask and
    length as traced leaves."""
    ta = _four()[3]
    out = jax.jit(lambda t: t.with_slots(t.buf + 1, t.mask, length=t.length + 1))(ta)
    assert (out.size, out.dtype, out.elem_shape) == (3, np.dtype(np.int32), (2,))
    assert np.array_equal(out.buf, np.asarray(ta.buf) + 1) and np.array_equal(out.mask, ta.mask)
    assert int(out.length) == 3


# ---- stacks, handles, static values ---------------------------------------------------------------------------
def test_a_dynamic_arrays_stack_is_its_buffer_and_length_and_is_fetched_cut_to_its_length() -> None:
    """``Stacked``: its buffer and length as given, as pytree children; fetched, the first ``length``
    rows of the buffer. Kills the fields made None and the buffer or the length read from None."""
    buf = np.arange(8).reshape(4, 2)
    s = Stacked(buf, np.int32(3))
    assert s.buf is buf and s.length == 3
    back = jax.tree_util.tree_map(lambda x: x, s)
    assert back.buf is buf and back.length == 3
    assert np.array_equal(to_host(s), buf[:3])


def test_a_handle_made_without_an_attributes_key_is_the_handle_whose_key_is_none() -> None:
    """``Handle``: compared by its kind, name and attributes key, which is None unless given; a pytree
    without leaves that rebuilds equal. Kills the key's default made ``""``."""
    h = Handle("var", "v")
    assert h == Handle("var", "v", None) and h.attrs_key is None and h != Handle("stack", "v")
    leaves, tree = jax.tree_util.tree_flatten(h)
    assert leaves == [] and jax.tree_util.tree_unflatten(tree, []) == h


def test_static_values_are_equal_exactly_when_their_dtype_shape_and_bytes_are() -> None:
    """``Static``: equal to another ``Static`` of the same dtype, shape and bytes, unequal where one of
    them differs or to anything not a ``Static``; it rebuilds from its tree as the numpy value
    itself. Kills the value or the key made None, ``and`` made ``or``, ``==`` made ``!=``."""
    a = np.arange(3, dtype=np.int32)
    s = Static(a)
    assert s == Static(a.copy()) and hash(s) == hash(Static(a.copy()))
    assert s != Static(a + 1) and s != Static(a.astype(np.int64)) and s != Static(a.reshape(3, 1))
    assert s != a.tobytes() and s != 0
    leaves, tree = jax.tree_util.tree_flatten(s)
    assert leaves == [] and jax.tree_util.tree_unflatten(tree, []) is a


def test_only_numpy_arrays_are_wrapped_as_static() -> None:
    """``wrap_static``: a numpy array becomes a ``Static`` of it; a JAX array, a Python number or
    ``DEAD`` stays as it is. Kills the test made always or never true and the wrapped value made
    None."""
    a = np.ones(2, np.float32)
    w = wrap_static(a)
    assert isinstance(w, Static) and w.value is a
    j = jnp.ones(2)
    assert wrap_static(j) is j and wrap_static(5) == 5 and wrap_static(DEAD) is DEAD


# ---- to_host --------------------------------------------------------------------------------------------------
def test_a_fetched_tensor_array_is_the_reference_backends_value_with_its_written_slots_only() -> None:
    """``to_host`` of a TensorArray: a ``TensorArrayValue`` of the dtype's name, the element shape,
    one item per slot of its size (its length for a dynamic array), each slot's row where its mask
    counts a write and None elsewhere, and whether it is dynamic; a pending array has every slot
    unwritten. Kills the count, the items or any field made None or dropped, the pending and mask
    tests made always or never true, and a row read from None."""
    pend, conc, _, dconc = _four()
    v = to_host(conc)
    assert (v.dtype, v.element_shape, v.dynamic, len(v.items)) == ("int32", (2,), False, 3)
    assert np.array_equal(v.items[0], [0, 1]) and v.items[1] is None and np.array_equal(v.items[2], [4, 5])
    assert isinstance(v.items[0], np.ndarray)
    d = to_host(dconc)
    assert d.dynamic is True and len(d.items) == 2 and d.items[1] is None and np.array_equal(d.items[0], [0, 1])
    p = to_host(pend)
    assert p.items == (None, None, None) and p.element_shape is None and p.dynamic is False


def test_a_fetched_handle_is_itself_and_any_other_value_a_numpy_array() -> None:
    """``to_host`` hands a resource handle back as it is and any other value as a numpy array of it.
    Kills the value made None."""
    h = Handle("var", "v")
    assert to_host(h) is h
    got = to_host(jnp.arange(3))
    assert isinstance(got, np.ndarray) and np.array_equal(got, [0, 1, 2])
