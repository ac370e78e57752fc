"""Laws of a fused group of a compiled partition (``turnout.devices.fused_group``): what a group says
of itself and how it becomes one compiled call. Each law kills mutants of the full set of
``devices/fused_group.py`` (issue 40, part 3; ``python tools/mutation.py --module
devices/fused_group.py --all``): a description that names the wrong members or cuts them at the wrong
count, a new group that looks compiled or refused, fed values taken in the wrong order or a member
reading a feed in place of its producer, a result left out, an error word that is set when every
check held or missed (or not 1) when one failed, a check known to hold while tracing that still costs
a word, a refusal of a run-time slice bound that is not a Turnout error, the module's exports.

Groups are built by hand from a few nodes of a small graph and ``compile_group``'s call is made
directly, read back through its ``CallSpec`` as ``compiled_partition`` reads it: no partition, no
task, no run (a few small jitted calls). The runs that fuse groups for real are in
``test_compiled_partition.py``.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
import test_exports

import turnout as tn
from turnout.devices.fused_group import Group, compile_group
from turnout.dtypes import int32
from turnout.errors import UnsupportedError
from turnout.graph import Node
from turnout.specs import TensorSpec


def _call(g: Group, *flat: object) -> tuple[dict, object]:
    """``g``'s compiled call on the flat values ``flat`` (by position), read as ``compiled_partition``
    reads it: the outputs by key (the static ones merged in) and the flags (None where the call
    returns no error word)."""
    with jax.enable_x64(True):
        res, tag = compile_group(g)(*flat)
        got, flags, _ = tag.spec.split(res)
    return {**got, **tag.spec.static}, flags


def _word(flags: object) -> int:
    return int(np.asarray(flags)[0])


def _named(n: int) -> Group:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        nodes = [tn.identity(x, name=f"m{i}").node for i in range(n)]
    return Group(0, tuple(nodes), {}, (), 0)


@pytest.mark.parametrize("n, want", [
    (2, "fused group of 2 ops (m0, m1)"),
    (3, "fused group of 3 ops (m0, m1, m2)"),
    (4, "fused group of 4 ops (m0, m1, m2, ...)"),
    (5, "fused group of 5 ops (m0, m1, m2, ...)"),
])
def test_a_group_is_described_by_its_size_and_first_three_members(n: int, want: str) -> None:
    """Law: a group is named by its number of ops and its first three members, with ", ..." only
    where there are more than three. Kills ``describe``'s join, slice, comparison and strings changed."""
    assert _named(n).describe() == want


def test_a_new_group_is_neither_compiled_nor_refused_and_its_head_is_its_first_member() -> None:
    """Law: a group starts with no compiled function (``compiled_partition`` compiles it at its first
    call, when ``fn is None``) and no reason to run interpreted; its head is its first member. Kills
    the defaults of ``fn`` and ``interpreted_reason`` made ""."""
    g = _named(2)
    assert g.fn is None and g.interpreted_reason is None
    assert g.head is g.members[0]


def _sub_mul() -> tuple[Node, Node]:
    """``d = x - y`` and ``p = d * z``, float32 scalars fed from outside."""
    g = tn.Graph()
    with g.as_default():
        x, y, z = (tn.placeholder(tn.float32, [], name=s) for s in "xyz")
        d = tn.subtract(x, y, name="d")
        p = tn.multiply(d, z, name="p")
    return d.node, p.node


def test_a_group_call_takes_its_feeds_by_position_and_returns_only_what_it_returns() -> None:
    """Law: the compiled call's flat arguments are the outside inputs in the order of their positions
    in ``slot_index`` (not of their keys), a member reads an input from inside the group from its
    producer, and the call returns exactly the outputs ``returns`` names. The positions are a
    permutation of the keys' order and the op is not commutative, so a wrong order shows. Kills the
    argument keys sorted otherwise or lost, the feed/producer choice flipped or forced, a member's
    lowering given a wrong argument, its outputs not recorded, the outputs or the call's other parts
    replaced."""
    d, p = _sub_mul()
    g = Group(0, (d, p), {(d.id, 1): 0, (p.id, 1): 1, (d.id, 0): 2}, ((p.id, 0),), 3)
    x, y, z = np.float32(7.0), np.float32(2.0), np.float32(3.0)
    got, flags = _call(g, y, z, x)
    assert list(got) == [(p.id, 0)]
    np.testing.assert_allclose(np.asarray(got[(p.id, 0)]), (x - y) * z)
    assert flags is None, "no member checks anything: the call returns no error word"


def _int_div(constant: bool) -> Group:
    """``q = a // b`` for int32 ``a`` and a divisor fed from outside, or the Const 2 as a member."""
    g = tn.Graph()
    with g.as_default():
        a = tn.placeholder(tn.int32, [], name="a")
        b = tn.constant(2, name="two") if constant else tn.placeholder(tn.int32, [], name="b")
        q = tn.divide(a, b, name="q")
    if constant:
        return Group(0, (b.node, q.node), {(q.node.id, 0): 0}, ((q.node.id, 0),), 1)
    return Group(0, (q.node,), {(q.node.id, 0): 0, (q.node.id, 1): 1}, ((q.node.id, 0),), 2)


def test_the_error_word_is_0_while_a_run_time_check_holds_and_1_where_it_fails() -> None:
    """Law: a member's check decided at run time (an integer division's divisor) is kept, and the
    call's error word is 0 where it held and exactly 1 where it failed (the caller then reruns the
    group on the reference kernels, which raise naming the op). Kills the check's ``ok`` dropped,
    replaced or tested with ``or`` (a traced value cannot be a Python bool), the checks' list lost,
    the word's ``jnp.all``/``stack``/``asarray`` broken, and ``where``'s arguments changed."""
    g = _int_div(constant=False)
    got, flags = _call(g, np.int32(7), np.int32(2))
    assert int(np.asarray(got[(g.members[0].id, 0)])) == 3 and _word(flags) == 0
    _, flags = _call(g, np.int32(7), np.int32(0))
    assert _word(flags) == 1


def test_a_check_known_to_hold_while_tracing_writes_no_error_word() -> None:
    """Law: a check that holds while tracing (a constant divisor) costs nothing: the call returns no
    error word. Kills the static test of ``_Checks.check`` broken (``is_static(None)``, ``bool(None)``)
    and the word computed when no check was kept (``if ctx.oks`` forced)."""
    g = _int_div(constant=True)
    got, flags = _call(g, np.int32(7))
    assert int(np.asarray(got[(g.members[1].id, 0)])) == 3 and flags is None


def _outside(members: tuple[Node, ...], returns: Node, values: dict[str, np.ndarray]) -> tuple[Group, list]:
    """A group of ``members`` whose every input from outside gets the next position (as
    ``compiled_partition`` numbers them), returning ``returns``'s output, and the flat values of its
    call: each outside input's value by the name of the node it reads (a Const's own value)."""
    inside = {m.id for m in members}
    slots = [((m.id, s), t) for m in members for s, t in enumerate(m.inputs) if t.node.id not in inside]
    group = Group(0, members, {k: i for i, (k, _) in enumerate(slots)}, ((returns.id, 0),), len(slots))
    return group, [values[t.node.name] if t.node.op != "Const" else np.asarray(t.node.attrs["value"])
                   for _, t in slots]


def test_a_slice_bound_known_only_at_run_time_is_refused_as_unsupported() -> None:
    """Law: a member whose slice bound comes from a fed value cannot be compiled (XLA needs static
    slice sizes), and a group feeds nothing it could be specialised on, so the trace refuses it with
    UnsupportedError naming the op (``compiled_partition`` then runs the group interpreted). Kills
    ``_Checks.fed`` made None (the refusal then fails with a TypeError, not a Turnout error)."""
    g = tn.Graph()
    with g.as_default():
        v = tn.placeholder(tn.float32, [4], name="v")
        k = tn.placeholder(tn.int32, [], name="k")
        s = v[:k]
        t = s * 2.0
    grp, flat = _outside((s.node, t.node), t.node, {"v": np.arange(4, dtype=np.float32), "k": np.int32(2)})
    with pytest.raises(UnsupportedError, match="static slice sizes"):
        _call(grp, *flat)


@pytest.mark.parametrize("index, word", [(2, 0), (-3, 0), (3, 1), (-4, 1)])
def test_a_run_time_index_is_checked_against_its_dimension(index: int, word: int) -> None:
    """Law: an index known only at run time (``v[i]``) is checked against its dimension (the group's
    table of ranges is empty: it knows nothing), the word 1 where it is out of range. Kills
    ``_Checks.ranges`` made None."""
    g = tn.Graph()
    with g.as_default():
        v = tn.placeholder(tn.float32, [3], name="v")
        i = tn.placeholder(tn.int32, [], name="i")
        e = v[i]
        t = e * 2.0
    grp, flat = _outside((e.node, t.node), t.node, {"v": np.arange(3, dtype=np.float32), "i": np.int32(index)})
    got, flags = _call(grp, *flat)
    assert _word(flags) == word
    if not word:
        assert float(np.asarray(got[(t.node.id, 0)])) == 2.0 * (index % 3)


def test_a_recomputed_loops_trip_count_passes_through_with_every_slot_given() -> None:
    """Law: a ``CheckpointTrips`` in a group (a compute op: it may be fused) passes the trip count on,
    and the group gives the loop every slot its budget holds (``slot_capacity`` None: no trace of a
    group sizes slots lower), so it has nothing to learn. Kills ``_Checks.slot_capacity`` made ""."""
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")
    trips = g.create_node("CheckpointTrips", [n], {"slots": 4}, name="trips", specs=[TensorSpec(int32, ())])
    grp = Group(0, (trips,), {(trips.id, 0): 0}, ((trips.id, 0),), 1)
    got, flags = _call(grp, np.int32(9))
    assert int(np.asarray(got[(trips.id, 0)])) == 9 and flags is None


def test_the_module_exports_what_it_defines() -> None:
    """Law: ``__all__`` names only what the module defines (``test_exports``'s law, for this module).
    Kills every mutant of ``__all__``."""
    test_exports.test_every_exported_name_exists("turnout.devices.fused_group")
