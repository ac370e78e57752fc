"""A TensorArray written in a compiled loop is updated in place: no O(n) copy per write.

Why a test on the optimized HLO: the write-once check of ``TensorArrayWrite`` must know whether slot j
was written while the write updates the slot table in place. When the check read the *old* table, XLA
(with nothing ordering the read and the in-place update) copied the whole table at every write, so a
``scan`` over n elements did O(n^2) work. The table now counts writes and the check reads the updated
count (``fast.values.TA``). Timings live in ``benchmarks/scan_forward.py``; this checks the cause.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

import turnout as tn

jax = pytest.importorskip("jax")
jnp = jax.numpy

N = 1000


class _Checks:
    """A lowering context that keeps each check's ``ok`` and knows no value's range."""

    def __init__(self) -> None:
        from turnout.fast.ranges import Ranges

        self.oks: list[Any] = []
        self.ranges = Ranges()
        self.fresh_writes: dict[int, frozenset[int]] = {}

    def check(self, ok: Any, message: str, code: str = "kernel") -> None:
        self.oks.append(ok)


def _write_loop_hlo(rule: Any, mask_dtype: Any) -> str:
    """The optimized HLO of a loop writing slot i at iteration i with ``rule``."""
    from turnout.fast.values import TA

    g = tn.Graph()
    with g.as_default():
        tn.TensorArray(tn.float32, size=N, element_shape=[]).write(tn.constant(0), tn.constant(1.0))
    node = next(x for x in g.nodes if x.op == "TensorArrayWrite")

    def run(buf: Any, mask: Any) -> Any:
        def body(i: Any, c: Any) -> Any:
            b, m, ok = c
            ctx = _Checks()
            (out,) = rule(ctx, node, [TA(N, np.float32, (), b, m), i, jnp.float32(1)])
            return out.buf, out.mask, ok & jnp.all(jnp.stack([jnp.asarray(o, bool) for o in ctx.oks]))
        return jax.lax.fori_loop(0, N, body, (buf, mask, jnp.asarray(True)))

    return str(jax.jit(run).lower(jnp.zeros(N, jnp.float32), jnp.zeros(N, mask_dtype)).compile().as_text())


def _table_copies(hlo: str) -> int:
    return len(re.findall(rf"= (?:s8|pred)\[{N}\]\S* copy\(", hlo))


def test_a_write_in_a_loop_copies_its_slot_table_at_most_once_at_entry() -> None:
    from turnout.fast.lowering import LOWERING_RULES
    from turnout.fast.values import MASK_DTYPE

    assert _table_copies(_write_loop_hlo(LOWERING_RULES["TensorArrayWrite"], MASK_DTYPE)) <= 1


def test_the_check_reading_the_old_table_is_what_made_the_copies() -> None:
    """The same loop with the check on the old table (a flag, as before): XLA copies it inside the loop.
    Keeps the test above meaningful: on an XLA that no longer copies here, this one fails first."""
    from turnout.fast.lowering import _ta_index
    from turnout.fast.values import TA

    def flag_write(ctx: Any, n: Any, xs: list[Any]) -> list[Any]:
        ta, i, v = xs
        j = _ta_index(ctx, n, ta, i, "TensorArrayWrite")
        ctx.check(~ta.mask[j], "already written")
        return [TA(ta.size, ta.dtype, ta.elem_shape, ta.buf.at[j].set(v), ta.mask.at[j].set(True))]

    assert _table_copies(_write_loop_hlo(flag_write, bool)) > 1


def test_a_slot_written_twice_is_still_refused_on_the_fast_backend() -> None:
    g = tn.Graph()
    with g.as_default():
        k = tn.placeholder(tn.int32, [], name="k")
        ta = tn.TensorArray(tn.float32, size=3).write(0, tn.constant(1.0)).write(k, tn.constant(2.0))
        y = ta.stack()
        second = ta.read(1)
    sess = tn.Session(g, backend="fast")
    np.testing.assert_equal(sess.run(second, {k: 1}), 2.0)
    with pytest.raises(tn.KernelError, match="already written"):
        sess.run(y, {k: 0})
