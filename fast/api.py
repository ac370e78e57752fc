"""``to_jax``: a Turnout graph as a pure JAX function.

Why: users with their own JAX code can call a Turnout program inside ``jax.jit`` (and ``jax.vmap``
where the program allows: ``lax.cond`` under vmap becomes a select, ``lax.while_loop`` runs until
every lane is done). The function is the same lowering the fast backend compiles, with these limits:
Variables are read at their *initial* values and assignments are dropped (the function is pure);
gradient stacks are single device buffers of ``stack_capacity`` entries (no host swapping inside a
user's trace); run-time kernel errors and dead fetches cannot raise inside a trace, so a fetch that is
dead whenever the program runs raises ``DeadFetchError`` at trace time and run-time checks are skipped.
float64 / int64 values need ``jax.enable_x64`` in the caller, as for any JAX code.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax.numpy as jnp

from turnout.arguments import checked
from turnout.errors import ArgumentError, DeadFetchError, UnsupportedError
from turnout.fast import stacks as stk
from turnout.fast.emit import Emitter, stack_key, var_key
from turnout.fast.functionalize import functionalize
from turnout.fast.outcome import ErrorCodes
from turnout.fast.plan import stack_dtype
from turnout.fast.regions import key
from turnout.fast.values import DEAD, TA, Handle, Stacked
from turnout.fast.variable_store import initial_value
from turnout.graph import Graph, Tensor


@checked
def to_jax(graph: Graph, inputs: Sequence[Tensor], outputs: Any, *, stack_capacity: int = 4096,
           max_iterations: int = 2**31 - 1) -> Callable[..., Any]:
    """``f(*input_values) -> outputs`` (a tensor gives one value, a list/tuple gives a tuple)."""
    single = isinstance(outputs, Tensor)
    if not single and not isinstance(outputs, (list, tuple)):
        raise ArgumentError(f"to_jax: outputs must be a tensor or a list or tuple of them, got {outputs!r}")
    outs = [outputs] if single else list(outputs)
    ins = list(inputs)
    program = functionalize(graph, outs, ins)
    nodes = {n.id: n for it in program.items for n in ([it] if not hasattr(it, "nodes") else it.nodes)}
    var_nodes = [n for n in nodes.values() if n.op == "VarHandle"]
    stack_nodes = [n for n in nodes.values() if n.op == "StackNew"]

    def fn(*args: Any) -> Any:
        if len(args) != len(ins):
            raise ArgumentError(f"to_jax function takes {len(ins)} inputs, got {len(args)}")
        em = Emitter(program, ErrorCodes(), stack_capacity, jnp.int32(max_iterations))
        em.fed = {t.node.id for t in ins}
        em.state = {"err": jnp.int32(0)}
        for vn in var_nodes:
            em.state[var_key(vn.attrs["var_name"])] = jnp.asarray(initial_value(vn))
        for sn in stack_nodes:
            em.state[stack_key(Handle("stack", sn.id))] = stk.StackValue(stack_capacity, stack_dtype(sn))
        env = {key(t): jnp.asarray(a, t.dtype.numpy) for t, a in zip(ins, args, strict=True)}
        em.run_items(program.items, env)
        res = [_output(t, env[key(t)]) for t in outs]
        return res[0] if single else tuple(res)

    return fn


def _output(t: Tensor, v: Any) -> Any:
    """The array a traced function returns for output ``t``: a TensorArray's buffer; refused where
    none can be returned (a dead output, or the stack of a TensorArray of dynamic size, whose shape
    is known only when the program runs: the fast backend cuts its run at such a read and finishes
    it on the host, which a function traced by the caller's ``jax.jit`` cannot)."""
    if v is DEAD:
        raise DeadFetchError(f"output {t.name} is dead: it lies on a branch that never runs")
    if isinstance(v, Stacked):
        raise UnsupportedError(f"to_jax: output {t.name} stacks a TensorArray of dynamic size, whose shape is known "
                               "only when the program runs; return the TensorArray itself (its buffer of "
                               "stack_capacity entries, the elements in front) and its size() instead")
    return v.buf if isinstance(v, TA) else v
