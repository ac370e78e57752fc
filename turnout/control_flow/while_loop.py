"""``while_loop``, lowered to Enter / Merge / LoopCond / Switch / NextIteration / Exit (the paper, Sec. 4.2).

Meaning, as plain Python::

    def while_loop(cond, body, loop_vars, maximum_iterations=None):
        i = 0
        while True:
            go = cond(*loop_vars)  # runs k + 1 times for k iterations, also when the bound stops the loop
            if maximum_iterations is not None and not i < maximum_iterations:
                go = False
            if not go:
                return loop_vars
            loop_vars = body(*loop_vars)
            i += 1

The predicate is a graph, not a Python ``and``: with ``maximum_iterations`` the pivot is
``LogicalAnd(i < maximum_iterations, cond(...))``, which evaluates both sides, so ``cond`` also runs
(and must not fail) in the iteration that the bound stops.

Lowering, per loop variable: ``Enter -> Merge(enter, next)``; ``LoopCond(cond(merges))`` is the
pivot; ``Switch(merge, pivot)``; the body reads ``Identity(Switch[1])``; ``NextIteration(body_out)``
closes the Merge's back edge; ``Exit(Switch[0])`` is the result. Outside tensors enter as
``Enter(is_constant=True)``, once per nesting level. The builder always adds an int32 iteration
counter as loop variable 0: ``maximum_iterations`` tests it, and gradients read the trip count from it
(the paper's forward counter, Sec. 5.2).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional

import numpy as np

from turnout import dtypes as dt
from turnout import nest
from turnout import shapes as sh
from turnout.arguments import check_arity, checked, positive_int
from turnout.control_flow import checkpoints
from turnout.control_flow.contexts import LoopVar, WhileContext, invariant_pivot
from turnout.control_flow.tensor_array import from_graph_value, to_graph_value
from turnout.errors import ArgumentError, DTypeError, GraphBuildError, ShapeError
from turnout.graph import BACK_EDGE, Tensor, TensorSpec, get_default_graph
from turnout.ops import cast, convert_argument, identity, logical_and, maximum, minimum


def _call(fn: Callable[..., Any], structure: Any, values: Any, where: str, what: str) -> Any:
    """Lists and plain tuples are spread as positional arguments (TensorFlow's convention); a single
    tensor, a dict or a namedtuple is passed as one argument. A ``fn`` that cannot take them is an
    ``ArgumentError`` naming ``what`` it is (``check_arity``)."""
    args = list(values) if isinstance(structure, (list, tuple)) and not hasattr(structure, "_fields") else [values]
    check_arity(fn, args, where, what)
    return fn(*args)


def _has_dict(x: Any) -> bool:
    if isinstance(x, dict):
        return True
    return isinstance(x, (list, tuple)) and any(_has_dict(v) for v in x)


def _shapes_like(structure: Any, shapes: Any) -> list[Any]:
    """Flatten ``shapes`` up to the structure of ``structure``: a shape is itself a list or tuple
    (``[None, 3]``), so it is a leaf wherever ``structure`` has a tensor, not a nested structure."""
    if isinstance(structure, dict):
        if not isinstance(shapes, dict) or set(shapes) != set(structure):
            raise GraphBuildError(f"while_loop: shape_invariants {shapes!r} do not match loop_vars")
        return [s for k in nest.sorted_keys(structure) for s in _shapes_like(structure[k], shapes[k])]
    if isinstance(structure, (list, tuple)):
        if not isinstance(shapes, (list, tuple)) or len(shapes) != len(structure):
            raise GraphBuildError(f"while_loop: shape_invariants {shapes!r} do not match loop_vars")
        return [s for v, sv in zip(structure, shapes, strict=True) for s in _shapes_like(v, sv)]
    return [shapes]


_ANY: Any = sh.ANY_SHAPE


def _graph_for(flat: list[Any]) -> Any:
    for v in flat:
        if isinstance(v, Tensor):
            return v.graph
    return get_default_graph()


@checked
def while_loop(
    cond: Callable[..., Any],
    body: Callable[..., Any],
    loop_vars: Any,
    parallel_iterations: int = 10,
    maximum_iterations: Any = None,
    shape_invariants: Any = None,
    back_prop: bool = True,
    swap_memory: bool = False,
    name: Optional[str] = None,
    memory_budget: Optional[int] = None,
) -> Any:
    """Repeat ``body`` while ``cond`` holds, starting from ``loop_vars``; returns the final values in
    the structure of ``loop_vars``, always: a one-element list gives a one-element list (TensorFlow 1
    unpacks it unless ``return_same_structure=True``; JAX and TensorFlow 2 keep it, as here).

    ``parallel_iterations`` bounds how many iterations may run at once (the results never depend on
    it). ``shape_invariants`` (same structure as ``loop_vars``) allows a loop variable whose shape
    changes across iterations: an entry is a shape with ``None`` for the sizes that may change,
    ``tn.ANY_SHAPE`` for a variable whose rank may change too, or ``None`` for no invariant (the shape of
    the initial value). ``back_prop=False`` makes the loop a constant for ``tn.gradients`` (no gradient
    flows through it, and nothing is saved for one). ``swap_memory`` asks the fast backend to keep this loop's gradient
    stacks in host memory. ``memory_budget``: the bytes this loop's saved values (its gradient stacks) may
    hold on the device at once, at any trip count (``docs/memory_budgets.rst``; ``turnout.memory_plan``
    decides how a run honours it, and a run that cannot is an error, never a silent overrun).
    """
    if not callable(cond) or not callable(body):
        raise GraphBuildError("while_loop: cond and body must be callables")
    if not isinstance(parallel_iterations, int) or isinstance(parallel_iterations, bool) or parallel_iterations < 1:
        raise GraphBuildError(f"while_loop: parallel_iterations must be a positive int, got {parallel_iterations!r}")
    if memory_budget is not None and not positive_int(memory_budget):
        raise ArgumentError(f"while_loop: memory_budget must be a positive int (bytes) or None, got {memory_budget!r}")
    leaves = nest.flatten(loop_vars, "while_loop: loop_vars")
    if not leaves:
        raise GraphBuildError("while_loop: loop_vars must contain at least one tensor")
    g = _graph_for(leaves)
    with g._all_or_nothing():  # a loop that fails to build leaves nothing behind (no unbound Merge)
        return _build(g, cond, body, loop_vars, leaves, parallel_iterations, maximum_iterations, shape_invariants,
                      back_prop, swap_memory, name, None if memory_budget is None else int(memory_budget))


def _settle_element_shape(init: Tensor, lv: LoopVar, out: Tensor) -> None:
    """Give the Exit of a TensorArray loop variable the element shape its body writes, where the
    array enters the loop fresh (a ``TensorArrayNew``, no slot written) and its element shape is not
    declared: as TensorFlow 1's TensorArray learns its element shape from its first write.

    Why: the loop variable's spec is fixed when it enters, before the body is built, so a stack
    after the loop had an unknown shape, not even a rank; a loop variable computed from it then no
    longer fitted its Merge, and gradients that need a rank (a concat's, a reduction's over a
    negative axis) were refused. Why only a fresh array: every value that leaves this loop and can
    be read or stacked was written by the body (a fresh array's unwritten slot fails when read or
    stacked), so its elements have the body's shape; an array written before the loop could, after
    no iteration, hold elements of another shape. The Exit's recorded spec is more precise than the
    one inferred from its Switch, which ``validate.spec_mismatch`` accepts (compatible shapes)."""
    if init.dtype != dt.tensor_array or lv.exit is None:
        return
    src = init
    while src.node.op == "Enter":
        src = src.node.inputs[0]
    have, body = lv.exit.outputs[0].spec, out.spec
    if src.node.op != "TensorArrayNew" or body.elem_shape is None or have.elem_shape == body.elem_shape:
        return
    if not sh.compatible(have.elem_shape, body.elem_shape):
        return
    lv.exit.outputs[0].spec = TensorSpec(have.dtype, have.shape, have.elem_dtype,
                                         sh.merge(have.elem_shape, body.elem_shape))


_INT32 = np.iinfo(np.int32)


def _iteration_bound(maximum_iterations: Any) -> Tensor:
    """``maximum_iterations`` as the int32 scalar the loop's counter is compared with. A constant must
    fit int32 (a numpy integer that does is taken as its value: numpy's integers are int64, and
    refusing ``maximum_iterations=np.int64(n)`` helped no one). An int64 tensor (TensorFlow counts in
    its bound's dtype) is saturated to int32 when the loop runs: the counter is int32, so a bound past
    its largest value bounds nothing the counter reaches, and one below its smallest stops the loop at
    once, as the bound itself would."""
    if isinstance(maximum_iterations, np.integer):
        maximum_iterations = int(maximum_iterations)  # (as a Python int: int32 where it fits, else refused)
    if isinstance(maximum_iterations, (float, np.floating)):
        raise DTypeError(f"while_loop: maximum_iterations must be an int32 or int64 scalar, got {maximum_iterations!r}")
    bound = convert_argument(maximum_iterations, "while_loop", "maximum_iterations")
    if bound.dtype not in (dt.int32, dt.int64) or (bound.shape is not None and bound.shape != ()):
        raise DTypeError(f"while_loop: maximum_iterations must be an int32 or int64 scalar, got {bound!r}")
    if bound.dtype == dt.int64:
        bound = cast(minimum(maximum(bound, np.int64(_INT32.min)), np.int64(_INT32.max)), dt.int32,
                     name="maximum_iterations")
    return bound


def _build(g: Any, cond: Callable[..., Any], body: Callable[..., Any], loop_vars: Any, leaves: list[Any],
           parallel_iterations: int, maximum_iterations: Any, shape_invariants: Any, back_prop: bool,
           swap_memory: bool, name: Optional[str], memory_budget: Optional[int] = None) -> Any:
    """``while_loop`` in graph ``g``, its arguments checked: the nodes of the lowering (see the module
    docstring)."""
    outer = g.current_context
    init = [convert_argument(to_graph_value(v), "while_loop", f"loop variable {i}") for i, v in enumerate(leaves)]
    if outer is not None:
        init = [outer.capture(t) for t in init]
    else:
        for t in init:
            if t.node.context is not None:
                raise GraphBuildError(
                    f"while_loop: loop variable {t.name} was created inside {t.node.context.describe()}"
                )
    invariants: list[Any] = [None] * len(init)
    if shape_invariants is not None:
        invariants = [s if s is _ANY else sh.as_shape(s) for s in _shapes_like(loop_vars, shape_invariants)]
        for t, s in zip(init, invariants, strict=True):
            if s is not _ANY and not sh.compatible(t.shape, s):
                raise ShapeError(
                    f"while_loop: shape invariant {sh.fmt(s)} does not fit the initial value {t.name} "
                    f"of shape {sh.fmt(t.shape)}"
                )
    max_iter = None if maximum_iterations is None else _iteration_bound(maximum_iterations)
    deps = [n for group in g._control_deps for n in group]
    lname = g.unique_name(name or "while")
    frame = g.unique_frame_name(lname)
    with g.control_dependencies(None):
        zero = g.create_node("Const", (), {"value": np.asarray(0, np.int32), "dtype": "int32"},
                             name=f"{lname}/counter_init").outputs[0]
    ctx = WhileContext(g, outer, frame, parallel_iterations, back_prop, swap_memory, max_iter, deps, lname,
                       memory_budget=memory_budget)
    ctx.structure = loop_vars
    ctx.body_fn = body
    enter_attrs = {"frame_name": frame, "is_constant": False, "parallel_iterations": parallel_iterations}

    # Enter -> Merge(enter, <back edge>) for the counter and every loop variable. A loop built in
    # another loop's body whose initial value is that loop's invariant (live at every iteration of
    # it, the exit iteration included) enters it under the outer loop's pivot: otherwise the inner
    # loop's header would run, live, in an outer iteration that never ran (and could fail there).
    with g._in_context(ctx), g._no_capture(), g.control_dependencies(None):
        for k, (t, inv) in enumerate(zip([zero, *init], [(), *invariants], strict=True)):
            e = g.create_node("Enter", [t], enter_attrs, name=f"{lname}/enter",
                              control_inputs=deps or invariant_pivot(outer, [t]))
            spec = e.outputs[0].spec
            if inv is not None and k > 0:
                spec = TensorSpec(spec.dtype, None if inv is _ANY else inv, spec.elem_dtype, spec.elem_shape)
            m = g.create_node("Merge", [e.outputs[0], BACK_EDGE], name=f"{lname}/merge",
                              specs=[spec, TensorSpec(dt.int32, ())])
            ctx.loop_vars.append(LoopVar(enter=e, merge=m))
    ctx.num_state = len(init)
    ctx.pivot_for_pred = ctx.counter.merge
    merged = [from_graph_value(lv.merge.outputs[0]) for lv in ctx.loop_vars]

    # The predicate, and LoopCond: the pivot.
    with g._in_context(ctx), g.control_dependencies(None), g.name_scope(f"{lname}/cond"):
        ctx.mode = "pred"
        p = _call(cond, loop_vars, nest.pack_as(loop_vars, merged[1:1 + len(init)]), f'while_loop "{lname}"', "cond")
        p = convert_argument(p, f'while_loop "{lname}"', "the value cond returns")
        p = ctx.capture(p)
        if p.dtype != dt.bool_ or (p.shape is not None and p.shape != ()):
            raise DTypeError(f'while_loop "{lname}": cond must return a bool scalar, got {p!r}')
        if max_iter is not None:
            p = logical_and(ctx.counter.merge.outputs[0] < ctx.capture(max_iter), p)
    ctx.pred = p
    with g._in_context(ctx), g._no_capture(), g.control_dependencies(None):
        ctx.pivot = g.create_node("LoopCond", [p], name=f"{lname}/loop_cond")
        for lv in ctx.loop_vars:
            lv.switch = g.create_node("Switch", [lv.merge.outputs[0], ctx.pivot.outputs[0]], name=f"{lname}/switch")
            lv.body_input = g.create_node("Identity", [lv.switch.outputs[1]], name=f"{lname}/body_in")
    with g._in_context(outer), g._no_capture(), g.control_dependencies(None):
        for lv in ctx.loop_vars:
            lv.exit = g.create_node("Exit", [lv.switch.outputs[0]], name=f"{lname}/exit")  # type: ignore[union-attr]
    ctx.pivot_for_body = ctx.counter.body_input

    # The body.
    with g._in_context(ctx), g.control_dependencies(None), g.name_scope(f"{lname}/body"):
        ctx.mode = "body"
        body_in = [from_graph_value(lv.body_input.outputs[0]) for lv in ctx.loop_vars]  # type: ignore[union-attr]
        out = _call(body, loop_vars, nest.pack_as(loop_vars, body_in[1:1 + len(init)]), f'while_loop "{lname}"', "body")
        if isinstance(loop_vars, (list, tuple)) and not isinstance(out, (list, tuple)) and len(loop_vars) == 1:
            out = [out]
        if isinstance(loop_vars, (list, tuple)) and isinstance(out, (list, tuple)) and not hasattr(out, "_fields"):
            out = type(loop_vars)(out) if not hasattr(loop_vars, "_fields") else out
        try:
            nest.assert_same_structure(loop_vars, out, f'while_loop "{lname}": body output and loop_vars')
        except GraphBuildError:
            # Lists and tuples may stand for each other; dict keys are names, never matched by position.
            same_leaves = len(nest.flatten(out)) == len(leaves) and nest.is_nested(out) == nest.is_nested(loop_vars)
            if _has_dict(out) or _has_dict(loop_vars) or not same_leaves:
                raise
        flat_out = [ctx.capture(convert_argument(to_graph_value(v), f'while_loop "{lname}"', f"body output {i}"))
                    for i, v in enumerate(nest.flatten(out))]
        # A body output that is a loop invariant itself goes through an Identity, which (reading only
        # invariants) depends on the pivot: a NextIteration fed straight from a constant Enter would
        # stay live after the predicate turns false, and the loop would never end.
        flat_out = [identity(t) if t.node.op == "Enter" and t.node.attrs.get("is_constant") else t
                    for t in flat_out]
        counter_next = ctx.counter.body_input.outputs[0] + 1  # type: ignore[union-attr]
    with g._in_context(ctx), g._no_capture(), g.control_dependencies(None):
        # (loop variables the body added, a random op's sync token, come after these and are closed)
        for k, (lv, t) in enumerate(zip(ctx.loop_vars[:1 + ctx.num_state], [counter_next, *flat_out], strict=True)):
            if t.dtype != lv.merge.outputs[0].dtype:
                raise DTypeError(
                    f'while_loop "{lname}": loop variable {k - 1} enters as {lv.merge.outputs[0].dtype.name} '
                    f"but the body returns {t.dtype.name} ({t.name})"
                )
            enters = lv.merge.outputs[0].spec.elem_dtype
            if t.spec.elem_dtype != enters:  # (TensorArrays: both are dtype tensor_array)
                raise DTypeError(
                    f'while_loop "{lname}": loop variable {k - 1} enters as a TensorArray of {enters.name} '  # type: ignore[union-attr]
                    f"but the body returns one of {t.spec.elem_dtype.name} ({t.name})"  # type: ignore[union-attr]
                )
            lv.next_iteration = g.create_node("NextIteration", [t], name=f"{lname}/next_iteration")
            lv.merge.close_back_edge(lv.next_iteration.outputs[0])
    for t0, lv, t in zip(init, checkpoints.state_vars(ctx), flat_out, strict=True):
        _settle_element_shape(t0, lv, t)
    ctx.accumulators = checkpoints.accumulators(ctx)
    ctx.mode = "done"
    results = [from_graph_value(lv.exit.outputs[0]) for lv in checkpoints.state_vars(ctx)]  # type: ignore[union-attr]
    return nest.pack_as(loop_vars, results)
