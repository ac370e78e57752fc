"""Import rules of TensorFlow's stateful random ops (``RandomUniform``, ``RandomStandardNormal``,
``TruncatedNormal``, ``RandomUniformInt``).

In a variable's initializer, the op is one draw, which the importer computes with TensorFlow's own
numbers (``tf_random``, through ``ImportContext.initial_value``) and imports as a constant; the
Variable starts with it and its Assign writes it. In the run graph (a dropout mask, noise) the op is
drawn anew at each execution: it becomes the stateful draw ``tn.random`` builds (``random.draw_part``:
a counter Variable read, a ``RandomDraw`` from it, the counter advanced), keyed by the node's own
``seed`` and ``seed2``, so its ``k``-th execution draws TensorFlow's ``k``-th values. Such an op
inside a TensorFlow while loop is refused: nothing in the imported loop orders its executions across
iterations (docs/missing.rst).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from turnout import tf_random
from turnout.errors import UnsupportedError
from turnout.graph import Tensor
from turnout.graphdef.import_context import FOLDED_OPS, ImportContext, Value
from turnout.graphdef.import_rules import IMPORT_RULES, Outs
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


def in_loop(t: Tensor) -> bool:
    """Whether ``t`` lies in a loop frame: walking back from it along first inputs (data, else
    control), an Enter is met before the Exits passed on the way are matched (a node without inputs,
    reached first, is in the root frame)."""
    depth, n = 0, t.node
    while True:
        if n.op == "Enter":
            if depth == 0:
                return True
            depth -= 1
        elif n.op == "Exit":
            depth += 1
        ins = [x for x in n.inputs if isinstance(x, Tensor)] or [c.outputs[0] for c in n.control_inputs if c.outputs]
        if not ins:
            return False
        n = ins[0].node


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
    """``random.draw_part`` under the node's name, on a counter Variable of its own, keyed by the node's
    ``(seed, seed2)`` (TensorFlow's fresh key for an unseeded op is drawn once, here)."""
    from turnout.random import draw_part

    shape, bounds = ins[0], ins[1:]
    anchors = [x for x in ins if isinstance(x, Tensor)] + [c.outputs[0] for c in ctx.ctrl_inputs() if c.outputs]
    if any(in_loop(t) for t in anchors):
        raise UnsupportedError(f"{ctx.where()}: a random op inside a TensorFlow while loop (DropoutWrapper in "
                               "dynamic_rnn, noise in a loop body) is not built: nothing in the imported loop orders "
                               "its draws across iterations")
    op = nd.op
    dtype = ctx.dtype("Tout" if op == "RandomUniformInt" else "dtype")
    if np.dtype(dtype.numpy) not in [np.dtype(d) for d in tf_random.DTYPES[op]]:
        raise UnsupportedError(f"{ctx.where()}: dtype {dtype.name} is not supported")
    seed, seed2 = tf_random.stream_seeds(int(ctx.attr("seed", 0)), int(ctx.attr("seed2", 0)))
    name = f"{ctx.prefix}{nd.name}/counter"
    counter = ctx.create("VarHandle", [], {"var_name": name, "dtype": "int64", "shape": [],
                                           "initial_value": np.asarray(0, np.int64)}, suffix="counter")
    ctx.graph.variables[name] = counter
    static = ctx.static(ctx.data_inputs()[0])
    dims = None if static is None else [int(d) for d in np.ravel(static)]
    attrs = {"distribution": op, "dtype": dtype.name, "seed": seed, "seed2": seed2}

    def create(o: str, inputs: Any, a: dict[str, Any], suffix: str, shape_: Any) -> Any:
        return ctx.create(o, inputs, a, suffix=suffix, shapes=None if shape_ is None else [shape_])

    drawn, advanced = draw_part(create, counter.outputs[0], shape, bounds, attrs, dims)
    return ctx.create("Identity", [drawn], control=[*ctx.ctrl_inputs(), advanced.node]).outputs[0]


__all__ = ["in_loop", "initializer_only"]
