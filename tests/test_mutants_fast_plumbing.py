"""Laws of the control-flow plumbing (``turnout.fast.plumbing``) that ``tests/test_fast_plumbing.py``
leaves unstated, each killing mutants of the module's full set (issue 40, part 3): the dead wires
name exactly the keys they are given, a Merge's index output takes the slot it reports, and the
module's export list names exactly its own public classes and functions. Each is checked on the
functions alone (no graph is run; the cond is ``test_fast_plumbing``'s), so a mutant of them fails
here within a second instead of after the module's whole list (the emitter's and the devices'
runs)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("jax")

from turnout.fast import plumbing  # noqa: E402
from turnout.fast.values import DEAD  # noqa: E402


def test_dead_wires_kill_exactly_the_keys_given_in_order() -> None:
    """[E-Switch-Dead], [E-Merge-AllDead]: ``dead(keys)`` makes one wire per key, in order, each
    writing ``DEAD`` to that key with no source; a wire to another key would leave the cond's output
    or the loop's Exit unwritten (and the next reader of it fails)."""
    keys = [("exit_a", 0), ("exit_b", 0), ("merge", 1)]
    wires = plumbing.dead(keys)
    assert [w.dst for w in wires] == keys
    assert all(w.src is None and w.value is DEAD for w in wires)
    assert plumbing.dead([]) == []


@pytest.mark.parametrize("b", [False, True])
def test_a_merges_index_output_reports_the_slot_of_the_input_it_forwards(b: bool) -> None:
    """[E-Merge-Live]: after branch ``b`` each Merge's second output (its ``value_index``) takes the
    int32 slot of the input it forwards, as ``branch_joins`` says; dead only where the Merge is (a
    Merge of the other branch alone). A program that fetches a cond's ``value_index`` reads it."""
    from test_fast_plumbing import _regions

    cr, _ = _regions()
    wires = plumbing.join_wires(cr, b)
    got = [w.value for w in wires[1::2]]
    assert [w.src for w in wires[1::2]] == [None] * len(cr.merges)
    assert [int(v) for v in got] == [slots[b] for _, slots in cr.merges]
    assert all(isinstance(v, np.ndarray) and v.dtype == np.int32 for v in got)


def test_the_module_exports_what_it_defines() -> None:
    """Every name in ``fast.plumbing.__all__`` is defined by the module (``tests/test_exports.py``'s
    law, for this module alone), and the list is exactly the module's own public classes and
    functions: not a name it imports (``DEAD`` is ``fast.values``'), none of its own left out. Kills
    the ``__all__`` mutants (a name misspelt, the list gone, ``dead`` exported as ``DEAD``)."""
    from test_exports import test_every_exported_name_exists

    test_every_exported_name_exists("turnout.fast.plumbing")
    own = {name for name, v in vars(plumbing).items()
           if not name.startswith("_") and getattr(v, "__module__", None) == plumbing.__name__}
    assert sorted(plumbing.__all__) == sorted(own)
