"""Laws of what every lowering rule shares (``turnout.fast.lowering_base``): the feeds behind a shape
argument (``feeds_behind``: the fed tensors whose values alone decide it, through constants, loop
invariants and pure ops; none through loop state, branches, effects or unfed Placeholders; ``Shape``
and ``Size`` always known), the refusal of a shape argument that is not static (``NeedsStatic`` with
those feeds, else ``UnsupportedError``), the outcome ``Specialise`` made from it, the allocation guard,
an op that fails whenever it runs, the dtype helpers, the refusal of Send and Recv, and the types
and names the module exports. Each law kills mutants of the full set of ``fast/lowering_base.py``
(issue 40, part 3; ``python tools/mutation.py --module fast/lowering_base.py --all``).

The functions are called directly, on stand-in nodes (an id, an op, inputs, attributes) and a
stand-in context, so the file takes about a second.
"""

from __future__ import annotations

import collections.abc
import inspect
import typing
from types import SimpleNamespace
from typing import Any

import jax.numpy as jnp
import numpy as np
import pytest
from stand_ins import CheckRecorder

import turnout as tn
from turnout.errors import ResourceExhaustedError, UnsupportedError, describe_node
from turnout.fast import lower_node as ln
from turnout.fast import lowering_base as lb
from turnout.fast.emitter_core import EmitterCore
from turnout.graph import Node
from turnout.limits import allocation_limit, check_allocation


class _Node:
    """A stand-in graph node: what ``feeds_behind`` reads (its id, op, inputs and attributes), with
    each read of its inputs counted."""

    def __init__(self, id: int, op: str, inputs: tuple[Any, ...] = (), **attrs: Any) -> None:
        self.id, self.op, self.attrs = id, op, attrs
        self._inputs = [t for t in inputs]
        self.reads = 0

    @property
    def inputs(self) -> list[Any]:
        self.reads += 1
        return list(self._inputs)


_ids = iter(range(1, 10**6))


def _t(op: str, *inputs: Any, index: int = 0, **attrs: Any) -> Any:
    """Output ``index`` of a new stand-in node."""
    return SimpleNamespace(node=_Node(next(_ids), op, inputs, **attrs), index=index)


def _key(t: Any) -> tuple[int, int]:
    return (t.node.id, t.index)


# -- feeds_behind --------------------------------------------------------------------------------


def test_a_value_of_fed_tensors_through_pure_ops_is_decided_by_exactly_those_feeds() -> None:
    """Law: a tensor computed by pure ops (and constant Enters) from fed tensors is decided by those
    feeds, each named by (node id, output index), and by nothing else; the default does not look
    through Switches."""
    p, q = _t("Placeholder"), _t("Placeholder", index=1)
    top = _t("Add", _t("Neg", p), _t("Enter", q, is_constant=True), _t("Const"))
    fed = {p.node.id, q.node.id}
    assert lb.feeds_behind(top, fed) == frozenset({_key(p), _key(q)})
    assert lb.feeds_behind(p, fed) == frozenset({_key(p)})


def test_a_value_no_feed_decides_has_no_feeds_behind_it() -> None:
    """Law: a tensor of constants alone (no feed behind it) has ``None`` behind it, not an empty set:
    making feeds static cannot help it."""
    assert lb.feeds_behind(_t("Add", _t("Const"), _t("Const")), set()) is None


@pytest.mark.parametrize("op", ["Merge", "Switch", "NextIteration", "Exit", "LoopCond", "Placeholder", "Sleep",
                                "TensorArrayReadV3", "StackPopV2", "AssignAdd", "VariableV2", "VarHandleOp"])
def test_a_value_through_loop_state_a_branch_an_effect_or_an_unfed_placeholder_is_not_from_feeds(op: str) -> None:
    """Law: a tensor that loop state, a branch, an effect (TensorArrays, stacks, Variables and their
    assignments, ``Sleep``) or a Placeholder that is not fed computes is not decided by the feeds,
    even with a fed tensor beside it: ``None``."""
    p = _t("Placeholder")
    top = _t("Add", p, _t(op, _t("Neg", p)))
    assert lb.feeds_behind(top, {p.node.id}) is None


def test_a_variable_enter_is_not_from_feeds_and_a_constant_one_is() -> None:
    """Law: a loop's Enter that is not constant (a loop variable's entry) stops the search (``None``);
    a constant Enter (a loop invariant) passes the search to its input."""
    p = _t("Placeholder")
    assert lb.feeds_behind(_t("Enter", p), {p.node.id}) is None
    assert lb.feeds_behind(_t("Enter", p, is_constant=False), {p.node.id}) is None
    assert lb.feeds_behind(_t("Enter", p, is_constant=True), {p.node.id}) == frozenset({_key(p)})


@pytest.mark.parametrize("op", ["Shape", "Size"])
def test_a_shape_or_size_is_known_whatever_computed_its_input(op: str) -> None:
    """Law: ``Shape`` and ``Size`` are known in every trace: nothing behind them is searched (an unfed
    Placeholder there does not make the value undecided), and the feeds beside them still count."""
    p, u = _t("Placeholder"), _t("Placeholder")
    assert lb.feeds_behind(_t("Add", p, _t(op, u)), {p.node.id}) == frozenset({_key(p)})
    assert lb.feeds_behind(_t(op, u), set()) is None


def test_the_search_goes_on_past_a_shape_and_past_a_node_seen_before() -> None:
    """Law: every input of every node reached is searched, whatever the order: a ``Shape`` or a node
    reached a second time ends only its own path, so an unfed Placeholder reached after them still
    makes the value undecided."""
    p, u = _t("Placeholder"), _t("Placeholder")
    fed = {p.node.id}
    assert lb.feeds_behind(_t("Add", u, _t("Shape", _t("Const")), p), fed) is None
    assert lb.feeds_behind(_t("AddN", u, p, p), fed) is None
    assert lb.feeds_behind(_t("Add", u, _t("Neg", p)), fed) is None


def test_each_node_is_searched_once_however_many_paths_reach_it() -> None:
    """Law: a node reached along several paths (a chain of diamonds) has its inputs read once: the
    search is linear in the graph, not in its paths."""
    p = _t("Placeholder")
    nodes, t = [], p
    for _ in range(6):
        t = _t("Add", t, t)
        nodes.append(t.node)
    assert lb.feeds_behind(t, {p.node.id}) == frozenset({_key(p)})
    assert [n.reads for n in nodes] == [1] * len(nodes)


def test_through_switch_follows_a_switch_to_its_value_and_predicate_and_no_further_op() -> None:
    """Law: with ``through_switch`` a Switch is followed to both its inputs (its value and its
    predicate), and what was still to search beside it is searched too; every other op of loop
    state or effects still stops the search."""
    v, pred, other = _t("Placeholder"), _t("Placeholder"), _t("Placeholder")
    fed = {v.node.id, pred.node.id, other.node.id}
    top = _t("Add", other, _t("Switch", v, pred))
    assert lb.feeds_behind(top, fed, through_switch=True) == frozenset({_key(v), _key(pred), _key(other)})
    assert lb.feeds_behind(top, fed) is None
    assert lb.feeds_behind(_t("Add", other, _t("Merge", v)), fed, through_switch=True) is None


# -- not_static, NeedsStatic, Specialise ----------------------------------------------------------


def test_a_shape_argument_feeds_decide_needs_those_feeds_static() -> None:
    """Law: ``not_static`` on input ``i`` of a node, when feeds decide that input, raises
    ``NeedsStatic`` with the message and exactly those feeds (and nothing to cut); the node's other
    inputs do not count."""
    p, q = _t("Placeholder"), _t("Placeholder")
    n = SimpleNamespace(inputs=[p, _t("Neg", q)])
    with pytest.raises(lb.NeedsStatic) as e:
        lb.not_static(CheckRecorder(fed={p.node.id, q.node.id}), n, 1, "the size is not static")  # type: ignore[arg-type]
    assert str(e.value) == "the size is not static"
    assert e.value.keys == frozenset({_key(q)}) and e.value.cut == frozenset()


def test_a_shape_argument_no_feed_decides_is_unsupported() -> None:
    """Law: ``not_static`` on an input no feed decides raises ``UnsupportedError`` with the message
    (not ``NeedsStatic``: specialising cannot help)."""
    n = SimpleNamespace(inputs=[_t("Merge", _t("Const"))])
    with pytest.raises(UnsupportedError) as e:
        lb.not_static(CheckRecorder(), n, 0, "the bound is not static")  # type: ignore[arg-type]
    assert str(e.value) == "the bound is not static" and not isinstance(e.value, lb.NeedsStatic)


def test_a_specialise_outcome_carries_the_refusals_feeds_message_and_cut() -> None:
    """Law: ``NeedsStatic`` keeps its message, feeds and cut (none by default), and
    ``Specialise.of`` it carries the same three; a ``Specialise`` made without a cut has none."""
    keys, cut = frozenset({(3, 0)}), frozenset({(5, 1)})
    e = lb.NeedsStatic("fill shape", keys, cut)
    assert (str(e), e.keys, e.cut) == ("fill shape", keys, cut)
    assert lb.NeedsStatic("m", keys).cut == frozenset()
    s = lb.Specialise.of(e)
    assert (s.keys, s.reason, s.cut) == (keys, "fill shape", cut)
    assert lb.Specialise(keys, "r").cut == frozenset()


# -- guard, fails_when_run, dtypes ----------------------------------------------------------------


def test_the_guard_refuses_a_tensor_over_the_limit_naming_the_node() -> None:
    """Law: ``guard`` lets a tensor within the allocation limit pass, and refuses one over it (by its
    shape and its dtype's item size) with the limit's message, naming the node first."""
    g = tn.Graph()
    with g.as_default():
        n = tn.fill([4], 1.0).node
    with allocation_limit(16):
        lb.guard(n, [16], np.int8)  # 16 bytes: at the limit
        lb.guard(n, [4], np.float32)
        with pytest.raises(ResourceExhaustedError) as e:
            lb.guard(n, [2, 2], np.float64)  # 32 bytes
        with pytest.raises(ResourceExhaustedError) as want:
            check_allocation(n.op, [2, 2], 8)
    assert str(e.value) == f"{describe_node(n)}: {want.value}"
    assert e.value.__cause__ is None and e.value.__suppress_context__


class _Checks:
    """A stand-in trace recording each check's condition as given."""

    def __init__(self) -> None:
        self.checks: list[tuple[Any, str]] = []

    def check(self, ok: Any, message: str, code: str = "kernel", shows: Any = None) -> None:
        self.checks.append((ok, message))


def test_an_op_that_fails_whenever_it_runs_sets_the_error_word_and_zeros_stand_in() -> None:
    """Law: ``fails_when_run`` checks a boolean ``False`` (the error word is set wherever the op
    runs) with the node named before the message, and returns zeros of the result's shape and dtype."""
    g = tn.Graph()
    with g.as_default():
        n = tn.fill([2], 1).node
    ctx = _Checks()
    (out,) = lb.fails_when_run(ctx, n, "shapes disagree", (2, 3), jnp.int32)  # type: ignore[arg-type]
    [(ok, message)] = ctx.checks
    assert np.asarray(ok).dtype == np.bool_ and not bool(np.asarray(ok))
    assert message == f"{describe_node(n)}: shapes disagree"
    assert out.shape == (2, 3) and out.dtype == jnp.int32 and not np.asarray(out).any()


def test_the_dtype_helpers_read_the_dtype() -> None:
    """Law: ``np_dtype`` is a Turnout dtype's numpy dtype; ``is_int`` holds for integer values and
    not for floating ones."""
    assert lb.np_dtype(tn.int32) == np.int32 and lb.np_dtype(tn.float64) == np.float64
    assert lb.is_int(jnp.asarray([1, 2], jnp.int32)) and lb.is_int(np.int8(3))
    assert not lb.is_int(jnp.asarray(1.5)) and not lb.is_int(np.float32(2))


# -- the refusal of Send and Recv, the types and names ------------------------------------------


@pytest.mark.parametrize("op", ["Send", "Recv"])
def test_send_and_recv_are_refused_by_the_fast_backend_pointing_at_the_reference(op: str) -> None:
    """Law: the fast backend lowers no ``Send`` or ``Recv`` (partitioned runs are the reference
    backend's): each is an ``UnsupportedError`` naming the node, saying why and where to run it."""
    n = SimpleNamespace(op=op, name="n1", attrs={}, outputs=[], inputs=[], source=None)
    assert op not in lb.LOWERING_RULES
    with pytest.raises(UnsupportedError) as e:
        ln.lower_node(CheckRecorder(), n, [])  # type: ignore[arg-type]
    assert str(e.value) == (f"fast backend: cannot lower {describe_node(n)}: unsupported: partitioned fast execution"
                            " is a later issue (run partitions with backend='reference')")


def test_a_rule_filed_with_lowering_rule_is_in_the_table_under_its_primitive() -> None:
    """Law: ``lowering_rule`` files a rule in ``LOWERING_RULES`` under its primitive's name (every
    rule module files its rules there)."""
    assert "Add" in lb.LOWERING_RULES and callable(lb.LOWERING_RULES["Add"])

    def rule(ctx: Any, n: Any, xs: Any) -> list[Any]:
        return []

    try:
        lb.lowering_rule("NoSuchPrimitiveForTest")(rule)
        assert lb.LOWERING_RULES["NoSuchPrimitiveForTest"] is rule
    finally:
        lb.LOWERING_RULES.pop("NoSuchPrimitiveForTest", None)


def test_the_protocols_check_states_the_emitters_defaults_and_the_types_resolve() -> None:
    """Law: ``LoweringContext.check`` has the defaults of the emitter's ``check`` (a failure's code
    ``kernel``, nothing shown); ``Shows`` is a pair of a message maker and values, and ``Rule`` a
    callable of a context, a node and its inputs returning a list."""
    def defaults(f: Any) -> dict[str, Any]:
        return {k: p.default for k, p in inspect.signature(f).parameters.items()
                if p.default is not inspect.Parameter.empty}

    assert defaults(lb.LoweringContext.check) == defaults(EmitterCore.check) == {"code": "kernel", "shows": None}
    # (the protocol's body, called once: the mutation tool counts a default as reached only where a
    # test runs the function that declares it)
    assert lb.LoweringContext.check(CheckRecorder(), True, "ok") is None  # type: ignore[arg-type]
    assert typing.get_origin(lb.Shows) is tuple
    assert typing.get_origin(typing.get_args(lb.Shows)[0]) is collections.abc.Callable
    assert typing.get_origin(lb.Rule) is collections.abc.Callable
    assert typing.get_args(lb.Rule)[0] == [lb.LoweringContext, Node, collections.abc.Sequence[Any]]


def test_every_name_lowering_base_exports_is_bound_there() -> None:
    """Law: every name of ``lowering_base.__all__`` is bound in the module (the rule modules and
    ``fast.lowering`` import them from here)."""
    for name in lb.__all__:
        assert hasattr(lb, name), name
