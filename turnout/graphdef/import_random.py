"""Import rules of TensorFlow's stateful random ops (``RandomUniform``, ``RandomStandardNormal``,
``TruncatedNormal``, ``RandomUniformInt``).

In a variable's initializer, the op is one draw, which the importer computes with TensorFlow's own
numbers (``tf_random``, through ``ImportContext.initial_value``) and imports as a constant; the
Variable starts with it and its Assign writes it. In the run graph (a dropout mask, noise) the op is
drawn anew at each execution: it becomes the stateful draw ``tn.random`` builds (``random.draw_part``:
a counter Variable read, a ``RandomDraw`` from it, the counter advanced), keyed by the node's own
``seed`` and ``seed2``, so its ``k``-th execution draws TensorFlow's ``k``-th values. Inside a
TensorFlow while loop the op gets a token loop variable in each loop around it (``_frame_token``), as
``tn.random`` threads one through a builder's loop, so its executions follow the iterations. In a
function body of control flow v2 (a ``While``'s body, imported inside ``tn.while_loop``'s callback)
the loops around the op are builders' loops, so it takes their tokens as ``tn.random`` does
(``random.loop_token``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional

import numpy as np

from turnout import tf_random
from turnout.errors import ArgumentError, UnsupportedError
from turnout.graph import BACK_EDGE, Node, Tensor
from turnout.graphdef.import_builders import in_builder, in_loop_cond, loop_enter, with_builders
from turnout.graphdef.import_context import FOLDED_OPS, ImportContext, Value
from turnout.graphdef.import_rules import IMPORT_RULES, Outs
from turnout.random_categorical import LOGIT_DTYPES, Create, categorical_part, reserved_outputs
from turnout.random_samplers import log_uniform_part, per_sample
from turnout.tables import registrar

_rule = registrar(IMPORT_RULES)


def initializer_only(ctx: ImportContext, name: str) -> bool:
    """Whether every use of node ``name``'s value, followed through the ops constant folding
    evaluates, ends as the value a variable's initializer writes: the ``Assign`` or
    ``AssignVariableOp`` TensorFlow names ``<variable>/Assign`` (a path that ends elsewhere, or
    nowhere, is a value the graph uses as it runs)."""
    seen, todo = {name}, [name]
    while todo:
        users = ctx.users(todo.pop())
        if not users:  # a value nothing in the graph reads: a fetch, drawn anew by each run
            return False
        for nd, slot in users:
            if nd.op in ("Assign", "AssignVariableOp") and slot == 1:
                if nd.name != f"{ctx.data_inputs(nd)[0].rpartition(':')[0]}/Assign":
                    return False
            elif nd.op in FOLDED_OPS or nd.op in tf_random.DTYPES or _guard_path(ctx, nd, slot):
                if nd.name not in seen:
                    seen.add(nd.name)
                    todo.append(nd.name)
            else:
                return False
    return True


def _guard_path(ctx: ImportContext, nd: Any, slot: int) -> bool:
    """Whether ``nd`` passes an initial value through the ``initialized_value()`` guard of another
    Variable's initializer (an ``ExponentialMovingAverage`` shadow starting from its Variable's
    initial value): the guard's Switch, by its data input, on a predicate that folds when
    initializers run (``ImportContext.initial_value``), or its Merge."""
    if nd.op in ("Switch", "RefSwitch"):
        return slot == 0 and ctx.initial_value(ctx.data_inputs(nd)[1]) is not None
    return nd.op in ("Merge", "RefMerge")


def _frame_token(ctx: ImportContext, enter: Node) -> tuple[Tensor, Callable[[Tensor], None]]:
    """A token loop variable of the frame ``enter`` enters (``random.loop_token`` for an imported
    loop): ``Enter -> Merge -> Switch(pivot) -> Identity`` whose value each iteration is the counter
    its draw just wrote, so the next iteration's read waits on it; entered from the enclosing frame's
    token (or a constant at the root). Returns the iteration's token and the function closing the
    back edge with the op's update. The frame's LoopCond must be imported already."""
    frame = enter.attrs["frame_name"]
    pivot = next((n for n in ctx.graph.nodes if n.op == "LoopCond"
                  and getattr(loop_enter(n.outputs[0]), "attrs", {}).get("frame_name") == frame), None)
    if pivot is None:
        raise UnsupportedError(f"{ctx.where()}: a random op inside TensorFlow while loop {frame!r} that reads only "
                               "the loop's invariants is not built (its draws could not be ordered across iterations)")
    outer = loop_enter(enter.inputs[0])
    if outer is None:
        init = ctx.create("Const", [], {"value": np.asarray(0, np.int64), "dtype": "int64"}, suffix="sync/init",
                          control=[]).outputs[0]
        close_outer: Callable[[Tensor], None] = lambda t: None  # noqa: E731
    else:
        init, close_outer = _frame_token(ctx, outer)
    attrs = {"frame_name": frame, "is_constant": False,
             "parallel_iterations": enter.attrs.get("parallel_iterations", 10)}
    e = ctx.create("Enter", [init], attrs, suffix="sync/enter", control=[])
    m = ctx.create("Merge", [e.outputs[0], BACK_EDGE], suffix="sync/merge", control=[])
    sw = ctx.create("Switch", [m.outputs[0], pivot.outputs[0]], suffix="sync/switch", control=[])
    body = ctx.create("Identity", [sw.outputs[1]], suffix="sync/body", control=[])
    ex = ctx.create("Exit", [sw.outputs[0]], suffix="sync/exit", control=[])

    def close(advanced: Tensor) -> None:
        m.close_back_edge(ctx.create("NextIteration", [advanced], suffix="sync/next", control=[]).outputs[0])
        close_outer(ex.outputs[0])

    return body.outputs[0], close


def _entered(ctx: ImportContext, t: Tensor, enter: Node) -> Tensor:
    """Root tensor ``t`` entered, as a loop invariant, into the frame ``enter`` enters and every frame
    around it (an imported graph has no capture: TensorFlow enters a handle as this does)."""
    outer = loop_enter(enter.inputs[0])
    if outer is not None:
        t = _entered(ctx, t, outer)
    attrs = {"frame_name": enter.attrs["frame_name"], "is_constant": True,
             "parallel_iterations": enter.attrs.get("parallel_iterations", 10)}
    return ctx.create("Enter", [t], attrs, suffix=f"enter_{enter.attrs['frame_name']}", control=[]).outputs[0]


@_rule(*tf_random.DTYPES)
def _random(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """The op's first draw as a constant in a variable's initializer; elsewhere the stateful draw."""
    if not initializer_only(ctx, nd.name):
        return [_stateful(ctx, nd, ins)]
    value = ctx.initial_value(f"{nd.name}:0")
    if value is None:
        raise UnsupportedError(f"{ctx.where()}: its shape and bounds must be known at import time "
                               f"(here {', '.join(ctx.data_inputs())})")
    return [ctx.const(value, [x for x in ins if isinstance(x, Tensor)], suffix=None)]


def _stateful(ctx: ImportContext, nd: Any, ins: list[Value]) -> Tensor:
    """``random.draw_part`` of the node's distribution, in ``_execution``."""
    from turnout.random import draw_part

    op = nd.op
    dtype = ctx.dtype("Tout" if op == "RandomUniformInt" else "dtype")
    if np.dtype(dtype.numpy) not in [np.dtype(d) for d in tf_random.DTYPES[op]]:
        raise UnsupportedError(f"{ctx.where()}: dtype {dtype.name} is not supported")
    static = ctx.static(ctx.data_inputs()[0])
    dims = None if static is None else [int(d) for d in np.ravel(static)]

    def part(create: Create, handle: Tensor, seeds: dict[str, Any]) -> tuple[Tensor, Tensor]:
        attrs = {"distribution": op, "dtype": dtype.name, **seeds}
        return draw_part(create, handle, ins[0], ins[1:], attrs, dims)  # type: ignore[arg-type]

    return _execution(ctx, ins, part)


@_rule("Multinomial")
def _multinomial(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``tf.random.categorical``: ``random_categorical.categorical_part`` in ``random.execution``, in
    ``_execution``."""
    from turnout.random import execution

    logits, count = ins
    if not isinstance(logits, Tensor) or logits.dtype.name not in LOGIT_DTYPES:
        raise UnsupportedError(f"{ctx.where()}: logits of dtype {ctx.dtype('T').name} are not supported "
                               f"(Turnout has {' and '.join(LOGIT_DTYPES)})")
    if logits.shape is not None and len(logits.shape) != 2:
        raise ArgumentError(f"{ctx.where()}: logits should be a matrix, got shape {list(logits.shape)}")
    if not isinstance(count, Tensor) or count.dtype.name != "int32" or (count.shape is not None and count.shape != ()):
        raise ArgumentError(f"{ctx.where()}: num_samples should be an int32 scalar")
    out = ctx.dtype("output_dtype").name
    known = ctx.static(ctx.data_inputs()[1])
    dims = None if known is None or logits.shape is None or logits.shape[0] is None else [logits.shape[0], int(known)]

    def part(create: Create, handle: Tensor, seeds: dict[str, Any]) -> tuple[Tensor, Tensor]:
        return execution(create, handle, lambda read: categorical_part(create, read, logits, count, out, seeds, dims),
                         lambda samples: reserved_outputs(create, samples))

    return [_execution(ctx, ins, part)]


@_rule("LogUniformCandidateSampler")
def _log_uniform_sampler(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``tf.random.log_uniform_candidate_sampler``: ``random_samplers.log_uniform_part`` (a loop of
    tries) in ``execution``, its three outputs waiting on the advance. Inside a TensorFlow v1 while
    loop it is refused (its loop of tries would have to be built in the frames of the GraphDef)."""
    from turnout.random import execution

    (classes,) = ins
    if not isinstance(classes, Tensor) or classes.dtype.name != "int64":
        raise ArgumentError(f"{ctx.where()}: true_classes must be an int64 tensor")
    if classes.shape is not None and len(classes.shape) != 2:
        raise ArgumentError(f"{ctx.where()}: true_classes must be a matrix, got shape {list(classes.shape)}")
    num_true, num_sampled, range_max = (int(ctx.attr(a)) for a in ("num_true", "num_sampled", "range_max"))
    unique = bool(ctx.attr("unique"))
    if range_max <= 0 or num_sampled < 0 or (unique and num_sampled > range_max):
        raise ArgumentError(f"{ctx.where()}: Sampler's range is too small (range_max {range_max}, num_sampled "
                            f"{num_sampled}, unique {unique})")
    anchors = [classes, *(c.outputs[0] for c in ctx.ctrl_inputs() if c.outputs)]

    def part(create: Create, handle: Tensor, seeds: dict[str, Any]) -> tuple[Any, Tensor]:
        counts: list[Tensor] = []

        def body(read: Tensor) -> Tensor:
            with with_builders(ctx, anchors):
                sampled, *rest = log_uniform_part(read, classes, num_true, num_sampled, unique, range_max, seeds)
            counts.extend(rest)
            return sampled

        sampled, advanced = execution(create, handle, body, lambda s: per_sample(create, s))
        return (sampled, *counts), advanced

    return list(_execution(ctx, ins, part))


@_rule("ComputeAccidentalHits")
def _accidental_hits(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """Where a row's true class was also sampled (``sampled_softmax_loss`` removes those logits): for
    each true class, in row-major order, that is among the samples, its row (int32), the position of
    its last occurrence among the samples (int64: the kernel's map from class to position keeps the
    last) and ``-FLT_MAX``; as many as there are hits, a length known when the program runs
    (``import_scatter.true_positions``). Not random: it reads what a sampler drew."""
    from turnout.graphdef.import_scatter import true_positions

    true, sampled = (x for x in ins)
    num_true = int(ctx.attr("num_true"))
    if not isinstance(true, Tensor) or not isinstance(sampled, Tensor) or true.dtype.name != "int64" \
            or sampled.dtype.name != "int64":
        raise ArgumentError(f"{ctx.where()}: true_candidates and sampled_candidates must be int64 tensors")
    if true.shape is not None and (len(true.shape) != 2 or true.shape[1] not in (None, num_true)):
        raise ArgumentError(f"{ctx.where()}: true_candidates must be a batch_size * num_true matrix, got shape "
                            f"{list(true.shape)}")
    if sampled.shape is not None and len(sampled.shape) != 1:
        raise ArgumentError(f"{ctx.where()}: sampled_candidates must be a vector, got shape {list(sampled.shape)}")
    ones = ctx.create("OnesLike", [sampled], suffix="ones").outputs[0]
    counted = ctx.create("Cumsum", [ctx.create("Cast", [ones], {"dtype": "int32"}, suffix="ones32").outputs[0]],
                         {"axis": 0}, suffix="counted").outputs[0]
    minus_one = ctx.const(np.asarray(-1, np.int32), [sampled], suffix="minus_one")
    position = ctx.create("Add", [counted, minus_one], suffix="position").outputs[0]
    same = ctx.create("Equal", [ctx.create("ExpandDims", [true], {"axis": 2}, suffix="column").outputs[0], sampled],
                      suffix="same").outputs[0]
    where = ctx.create("Select", [same, position, minus_one], suffix="where").outputs[0]
    last = ctx.create("Max", [where], {"axis": 2, "keepdims": False}, suffix="last").outputs[0]
    flat = ctx.create("Reshape", [last], {"shape": [-1]}, suffix="flat").outputs[0]
    hit = ctx.create("Cast", [ctx.create("GreaterEqual", [flat, ctx.const(np.asarray(0, np.int32), [flat],
                                                                          suffix="zero")], suffix="found").outputs[0]],
                     {"dtype": "int32"}, suffix="hit").outputs[0]
    kept = true_positions(ctx, hit, "hits")
    width = ctx.const(np.asarray(num_true, np.int32), [kept], suffix="num_true")
    rows = ctx.create("Div", [kept, width], suffix="out0").outputs[0]
    ids = ctx.create("Cast", [ctx.create("Gather", [flat, kept], {"axis": 0}, suffix="ids32").outputs[0]],
                     {"dtype": "int64"}, suffix="out1").outputs[0]
    lowest = ctx.const(np.asarray(-np.finfo(np.float32).max, np.float32), [kept], suffix="lowest")
    weights = ctx.create("Fill", [ctx.create("Shape", [kept], suffix="hits_shape").outputs[0], lowest]).outputs[0]
    return [rows, ids, weights]


def _execution(ctx: ImportContext, ins: list[Value],
               part: Callable[[Create, Tensor, dict[str, Any]], tuple[Any, Tensor]]) -> Any:
    """One execution of a stateful random op under the node's name: ``part`` (its counter's read, its
    draw and its advance) on a counter Variable of its own, keyed by the node's ``(seed, seed2)``
    (TensorFlow's fresh key for an unseeded op is drawn once, here), after the token of the loops
    around it; its value (a tensor, or a tuple of them) waits on the advance."""
    anchors = [x for x in ins if isinstance(x, Tensor)] + [c.outputs[0] for c in ctx.ctrl_inputs() if c.outputs]
    # (a function body inside a builder: its values lie in the builder's frames, which it threads
    # tokens through; a call at the top level, in a TensorFlow v1 frame or none, is read as the GraphDef)
    enter = None if in_builder(ctx) else next((e for e in map(loop_enter, anchors) if e is not None), None)
    if enter is not None and any(in_loop_cond(t) for t in anchors):
        raise UnsupportedError(f"{ctx.where()}: a random op in a cond inside a TensorFlow while loop is not built "
                               "(its draws could not be ordered across iterations)")
    seed, seed2 = tf_random.stream_seeds(int(ctx.attr("seed", 0)), int(ctx.attr("seed2", 0)))
    name = f"{ctx.prefix}{ctx.node.name}/counter"
    counter = _counter(ctx, name)
    token, close = _token(ctx, enter)
    ctx.graph.variables[name] = counter
    handle = counter.outputs[0] if enter is None else _entered(ctx, counter.outputs[0], enter)

    def create(o: str, inputs: Any, a: dict[str, Any], suffix: str, shape_: Any) -> Any:
        wait = [token.node] if token is not None and (o == "ReadVariable" or not inputs) else []
        return ctx.create(o, inputs, a, suffix=suffix, shapes=None if shape_ is None else [shape_],
                          control=[*ctx.ctrl_inputs(), *wait])

    value, advanced = part(create, handle, {"seed": seed, "seed2": seed2})
    if close is not None:
        close(advanced)
    if isinstance(value, tuple):  # (several outputs: the last takes the node's name)
        return tuple(ctx.create("Identity", [v], suffix=None if k == len(value) - 1 else f"out{k}",
                                control=[*ctx.ctrl_inputs(), advanced.node]).outputs[0] for k, v in enumerate(value))
    return ctx.create("Identity", [value], control=[*ctx.ctrl_inputs(), advanced.node]).outputs[0]


def _token(ctx: ImportContext, enter: Optional[Node]) -> tuple[Optional[Tensor], Optional[Callable[[Tensor], None]]]:
    """The iteration's token the op's counter read waits on, and the function passing its update on
    as the next iteration's: a builder's (in a v2 function body), a v1 frame's, or none at the root."""
    from turnout.random import loop_token

    if in_builder(ctx):
        with ctx.graph._in_context(ctx.flow_context):
            return loop_token(ctx.flow_context, f"{ctx.prefix}{ctx.node.name}")
    return _frame_token(ctx, enter) if enter is not None else (None, None)


def _counter(ctx: ImportContext, name: str) -> Node:
    """The op's counter Variable, at the root of the graph (a VarHandle made inside a builder's loop
    would be a value of each iteration, not one Variable)."""
    attrs = {"var_name": name, "dtype": "int64", "shape": [], "initial_value": np.asarray(0, np.int64)}
    flow, ctx.flow_context = ctx.flow_context, None
    try:
        return ctx.create("VarHandle", [], attrs, suffix="counter", control=[])
    finally:
        ctx.flow_context = flow


@_rule("Qr", "DiagPart")
def _initializer_fold(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """A ``Qr`` or ``DiagPart`` of an initializer (``orthogonal_initializer``: the Q of a random normal
    matrix, its columns' signs those of R's diagonal), computed at import like the draw it reads
    (numpy's QR, which agrees with TensorFlow's to rounding, not bit for bit); elsewhere refused."""
    if not initializer_only(ctx, nd.name):
        raise UnsupportedError(f"{ctx.where()}: {nd.op} is supported only in a variable's initializer "
                               "(computed once, at import)")
    n_out = 2 if nd.op == "Qr" else 1
    vals = [ctx.initial_value(f"{nd.name}:{k}") for k in range(n_out)]
    if any(v is None for v in vals):
        raise UnsupportedError(f"{ctx.where()}: its input must be known at import time")
    anchors = [x for x in ins if isinstance(x, Tensor)]
    return [ctx.const(v, anchors, suffix=None if k == n_out - 1 else f"out{k}") for k, v in enumerate(vals)]


__all__ = ["initializer_only"]
