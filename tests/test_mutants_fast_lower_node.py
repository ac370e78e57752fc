"""Laws of one node lowered while tracing (``turnout.fast.lower_node``): a pure compute node whose
inputs are all known is folded by the reference kernels (numpy values, the oracle's), unless it is
one of ``NO_FOLD`` or its outputs pass ``FOLD_BYTES`` (a value too large by its static shapes is
never computed); a kernel's refusal of known values is the node's error word with zeros standing
in; a shape rule's refusal of traced values likewise; else the primitive's rule lowers it, and a
primitive with no rule, or a rule that trips over its inputs, is an ``UnsupportedError`` naming the
node. Each law kills mutants of the full set of ``fast/lower_node.py`` (issue 40, part 3;
``python tools/mutation.py --module fast/lower_node.py --all``).

The functions are called directly with a stand-in context that records its checks.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import jax.numpy as jnp
import numpy as np
import pytest
import test_exports
from stand_ins import CheckRecorder

import turnout as tn
from turnout import kernels
from turnout.errors import FeedError, KernelError, UnsupportedError, describe_node
from turnout.fast import lower_node as ln
from turnout.fast.lowering_base import LOWERING_RULES, UNSUPPORTED
from turnout.fast.values import is_static
from turnout.primitives import COMPUTE


def _fills() -> dict[str, Any]:
    """Fill nodes of a static shape (16384 and 16385 float32: 64 KiB and 4 bytes more), of a fed
    vector shape (unknown dimension) and of a fed shape of unknown rank."""
    g = tn.Graph()
    with g.as_default():
        at = tn.fill([16384], 1.0)
        over = tn.fill([16385], 1.0)
        dims = tn.fill(tn.placeholder(tn.int32, [1], name="d"), 1.0)
        rank = tn.fill(tn.placeholder(tn.int32, None, name="r"), 1.0)
    return {"at": at.node, "over": over.node, "dims": dims.node, "rank": rank.node}


def _args(n: int) -> list[Any]:
    return [np.asarray([n], np.int32), np.asarray(1.0, np.float32)]


def test_a_known_pure_node_is_folded_by_the_reference_kernels() -> None:
    """Law: a compute node whose inputs are all numpy is folded: numpy values (known while tracing),
    the reference kernel's, of its dtype and shape."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [2], name="x")
        y = tn.pow(x, 3.0) - 1.0
    n = y.node.inputs[0].node
    xs = [np.asarray([2.0, 0.5], np.float32), np.asarray(3.0, np.float32)]
    outs = ln.fold(n, xs)
    want = kernels.run_kernel(n.op, xs, n.attrs)
    assert isinstance(outs, list) and all(is_static(v) for v in outs)
    for a, b in zip(outs, want, strict=True):
        assert a.dtype == b.dtype and a.tobytes() == np.asarray(b).tobytes()
    assert ln.fold(n, [jnp.asarray(xs[0]), xs[1]]) is None  # a traced input: not known


def test_no_fold_ops_and_non_compute_ops_are_never_folded() -> None:
    """Law: TensorArray ops, ``Sleep`` and the checkpoint slots' count and trip count are never
    folded (their values are built in place, must wait when run, or size the slots), nor is a node
    that is not pure compute; no kernel is asked (``fold`` returns None before it)."""
    ops = {p for p in COMPUTE if p.startswith("TensorArray")} | {"Sleep", "CheckpointSlots", "CheckpointTrips"}
    assert ln.NO_FOLD == frozenset(ops) and len(ops) > 3
    for op in [*sorted(ops), "Switch", "Placeholder"]:
        assert ln.fold(SimpleNamespace(op=op, outputs=[], attrs={}), []) is None, op


def test_a_value_of_at_most_fold_bytes_is_folded_a_larger_one_never_computed(monkeypatch: pytest.MonkeyPatch
                                                                              ) -> None:
    """Law: a value of 64 KiB is folded and one of 4 bytes more is not, whether its size is known
    from its static shape or only once computed (an unknown dimension, an unknown rank); a value
    over the bound by its static shape is not computed at all (the kernel is not run)."""
    assert ln.FOLD_BYTES == 64 * 1024
    f = _fills()
    calls: list[str] = []
    run = kernels.run_kernel

    def counted(op: str, xs: Any, attrs: Any) -> Any:
        calls.append(op)
        return run(op, xs, attrs)

    monkeypatch.setattr(kernels, "run_kernel", counted)
    (at,) = ln.fold(f["at"], _args(16384)) or [None]
    assert at is not None and at.nbytes == ln.FOLD_BYTES and len(calls) == 1
    assert ln.fold(f["over"], _args(16385)) is None and len(calls) == 1
    for key in ("dims", "rank"):
        (got,) = ln.fold(f[key], _args(16384)) or [None]
        assert got is not None and got.shape == (16384,)
        assert ln.fold(f[key], _args(16385)) is None
    assert len(calls) == 5


def test_a_kernels_refusal_of_known_values_is_the_nodes_error_word() -> None:
    """Law: a node whose known inputs its kernel refuses (a gather's index out of range) is not
    refused while tracing: its check, a boolean array False, fails with the kernel's words naming
    the node (kills the condition given as None or ``np.asarray(None)``), and numpy zeros of its
    outputs' static shapes (an unknown dimension 0) and dtypes stand in."""
    g = tn.Graph()
    with g.as_default():
        ix = tn.placeholder(tn.int32, [None], name="ix")
        ga = tn.gather(tn.constant(np.ones((3, 2), np.float32)), ix)
    n = ga.node
    xs = [np.ones((3, 2), np.float32), np.asarray([0, 5], np.int32)]
    with pytest.raises(KernelError) as e:
        kernels.run_kernel(n.op, xs, n.attrs)
    assert isinstance(ln.fold(n, xs), KernelError)
    ctx, oks = CheckRecorder(), []
    record = ctx.check
    ctx.check = lambda ok, message, code="kernel", shows=None: (oks.append(ok), record(ok, message, code, shows))
    (out,) = ln.lower_node(ctx, n, xs)
    assert ctx.failed() == [f"{describe_node(n)}: {e.value}"]
    (ok,) = oks  # the condition a trace sets the error word by: a boolean array, False
    assert isinstance(ok, np.ndarray) and ok.dtype == np.bool_ and ok.shape == () and not ok
    assert is_static(out) and out.shape == (0, 2) and out.dtype == np.float32 and not out.any()


def test_a_shape_rules_refusal_of_traced_values_is_the_nodes_error_word() -> None:
    """Law: traced inputs whose shapes the op's shape rule refuses (a matmul of 2x3 by 2x3) give
    the rule's words as the node's failed check and zeros of its static output type; shapes it
    takes are lowered by the rule, with no failed check, to the reference's values."""
    g = tn.Graph()
    with g.as_default():
        a = tn.placeholder(tn.float32, [None, None], name="a")
        b = tn.placeholder(tn.float32, [None, None], name="b")
        m = tn.matmul(a, b)
    n = m.node
    ctx = CheckRecorder()
    (out,) = ln.lower_node(ctx, n, [jnp.ones((2, 3), jnp.float32), jnp.ones((2, 3), jnp.float32)])
    (msg,) = ctx.failed()
    assert msg.startswith(f"{describe_node(n)}: ") and out.shape == (0, 0) and out.dtype == np.float32
    ctx = CheckRecorder()
    x, y = np.arange(6, dtype=np.float32).reshape(2, 3), np.ones((3, 2), np.float32)
    (out,) = ln.lower_node(ctx, n, [jnp.asarray(x), jnp.asarray(y)])
    assert ctx.failed() == [] and not is_static(out)
    np.testing.assert_array_equal(np.asarray(out), kernels.run_kernel(n.op, [x, y], n.attrs)[0])


def test_a_primitive_without_a_rule_is_unsupported_naming_the_node_and_why() -> None:
    """Law: a primitive with no lowering rule is an ``UnsupportedError`` naming the node and the
    reason ``UNSUPPORTED`` gives for it, or "no lowering rule"."""
    for op, why in [("Send", UNSUPPORTED["Send"]), ("NoSuchOp", "no lowering rule")]:
        n = SimpleNamespace(op=op, name="n1", attrs={}, outputs=[], inputs=[], source=None)
        with pytest.raises(UnsupportedError) as e:
            ln.lower_node(CheckRecorder(), n, [])
        assert str(e.value) == f"fast backend: cannot lower {describe_node(n)}: {why}"


@pytest.mark.parametrize("error", [TypeError, ValueError, IndexError])
def test_a_rule_that_trips_over_its_inputs_is_unsupported(monkeypatch: pytest.MonkeyPatch, error: type) -> None:
    """Law: a ``TypeError``, ``ValueError`` or ``IndexError`` from a rule becomes an
    ``UnsupportedError`` naming the node and the error, with no chained cause."""
    def rule(ctx: Any, n: Any, xs: Any) -> Any:
        raise error("bad operand")

    monkeypatch.setitem(LOWERING_RULES, "Fake", rule)
    n = SimpleNamespace(op="Fake", name="n2", attrs={}, outputs=[], inputs=[], source=None)
    with pytest.raises(UnsupportedError) as e:
        ln.lower_node(CheckRecorder(), n, [])
    assert str(e.value) == f"fast backend: cannot lower {describe_node(n)}: bad operand"
    assert e.value.__cause__ is None and e.value.__suppress_context__


def test_a_rules_turnout_error_and_values_pass_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    """Law: a Turnout error a rule raises (it already says what is wrong) passes as it is, and a
    rule's outputs are the node's, the rule called with the context, node and inputs given."""
    raised = FeedError("unfed")
    seen: list[Any] = []

    def refuse(ctx: Any, n: Any, xs: Any) -> Any:
        raise raised

    def echo(ctx: Any, n: Any, xs: Any) -> Any:
        seen.append((ctx, n, xs))
        return ["out"]

    monkeypatch.setitem(LOWERING_RULES, "Refuse", refuse)
    monkeypatch.setitem(LOWERING_RULES, "Echo", echo)
    n = SimpleNamespace(op="Refuse", name="n3", attrs={}, outputs=[], inputs=[], source=None)
    with pytest.raises(FeedError) as e:
        ln.lower_node(CheckRecorder(), n, [])
    assert e.value is raised
    m = SimpleNamespace(op="Echo", name="n4", attrs={}, outputs=[], inputs=[], source=None)
    ctx, xs = CheckRecorder(), []
    assert ln.lower_node(ctx, m, xs) == ["out"] and seen == [(ctx, m, xs)]


def test_the_module_exports_what_it_defines() -> None:
    """Law: ``__all__`` names only what the module defines (``test_exports``'s law, for this module).
    Kills every mutant of ``__all__`` (a name renamed, or ``None``)."""
    test_exports.test_every_exported_name_exists("turnout.fast.lower_node")
