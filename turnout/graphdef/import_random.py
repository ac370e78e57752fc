"""Import rules of TensorFlow's stateful random ops (``RandomUniform``, ``RandomStandardNormal``,
``TruncatedNormal``, ``RandomUniformInt``) where a TF1 model uses them: in variable initializers.

Why only there: an initializer runs once, so its random op is one draw, which the importer computes
with TensorFlow's own numbers (``tf_random``, through ``ImportContext.initial_value``) and imports as
a constant; the Variable starts with it and its Assign writes it. A random op the run graph draws
from every step (a dropout mask) would need a random stream that every backend draws identically,
which Turnout does not have yet (docs/missing.rst), so such an op is refused, never frozen into a
constant.
"""

from __future__ import annotations

from typing import Any

from turnout.errors import UnsupportedError
from turnout.graph import Tensor
from turnout.graphdef import tf_random
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


@_rule(*tf_random.DTYPES)
def _random(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """The op's first draw, as TensorFlow's CPU kernel makes it, as a constant: for a random op of a
    variable initializer only."""
    if not initializer_only(ctx, nd.name):
        raise UnsupportedError(f"{ctx.where()}: a random op is supported only in a variable's initializer "
                               "(drawn once, at import); one the graph draws from as it runs (a dropout mask, "
                               "noise) is not built yet")
    value = ctx.initial_value(f"{nd.name}:0")
    if value is None:
        raise UnsupportedError(f"{ctx.where()}: its shape and bounds must be known at import time "
                               f"(here {', '.join(ctx.data_inputs())})")
    return [ctx.const(value, [x for x in ins if isinstance(x, Tensor)], suffix=None)]


__all__ = ["initializer_only"]
