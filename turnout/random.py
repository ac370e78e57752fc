"""``tn.random``: random ops that a graph draws from every time it runs, as TensorFlow's stateful ones.

Meaning (docs/random.rst): a random op's ``k``-th execution in a session draws the ``k``-th chunk of
its own Philox stream, keyed by its seeds, exactly as TensorFlow's kernel does: an execution of ``n``
outputs takes the Philox calls from the op's counter on and moves the counter ``256 n`` calls on
(``tf_random.reserved_calls``). Executions are counted in the order the graph's edges give: across
``Session.run`` calls, and across the iterations of the loops around the op.

How, composed from what exists: the counter is an ordinary int64 ``Variable`` (session state, like
any other), and one execution is ``read -> RandomDraw(shape, counter) -> assign_add(256 n)``, the
output waiting on the assign. ``RandomDraw`` is a pure primitive (``turnout.random_rules``), so
every executor's Variable semantics gives the same stream. Inside a ``while_loop`` the read of
iteration ``i + 1`` must follow the assign of iteration ``i`` whatever ``parallel_iterations``
allows: the op threads a token through each loop around it (``WhileContext.add_loop_var``, as a
gradient's sync variable), its value the counter just assigned.

Seeds follow TensorFlow 1's ``get_seed``: the graph seed (``set_random_seed``) is the key's
``seed``, the op's ``seed`` its ``seed2``; with only an op seed the graph seed is 87654321, with only
a graph seed the op seed is the number of nodes built so far. With neither, a key is drawn once, when
the op is built (TensorFlow draws one per session), so every executor still draws the same numbers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Optional

import numpy as np

from turnout import dtypes as dt
from turnout import tf_random
from turnout.arguments import checked
from turnout.control_flow.contexts import CondContext, WhileContext
from turnout.errors import ArgumentError, UnsupportedError
from turnout.graph import Graph, Node, Tensor, get_default_graph
from turnout.ops import constant, control_dependencies, convert_to_tensor, identity
from turnout.specs import TensorSpec
from turnout.variables import Variable

DEFAULT_GRAPH_SEED = 87654321  # TensorFlow 1's, for an op seeded without a graph seed
#: TensorFlow's ``get_seed`` takes every seed modulo this (``_truncate_seed``: to fit 32 bits)
SEED_MODULUS = 2**31 - 1


@checked
def set_random_seed(seed: Optional[int], graph: Optional[Graph] = None) -> None:
    """Set the graph-level seed of ``graph`` (the default graph), as ``tf.compat.v1.set_random_seed``:
    the random ops built after it get seeds from it (module docstring); None unsets it."""
    _check_seed(seed, "set_random_seed")
    (graph or get_default_graph()).random_seed = None if seed is None else int(seed)


def _check_seed(seed: Any, who: str) -> None:
    """Refuse a seed that is not an int or None (a float or a string was truncated or parsed)."""
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))):
        raise ArgumentError(f"{who}: seed must be an int or None, got {seed!r}")


def get_seed(op_seed: Optional[int], graph: Optional[Graph] = None) -> tuple[int, int]:
    """The key ``(seed, seed2)`` of a random op built now with op seed ``op_seed``: TensorFlow 1's
    ``get_seed``, with the unseeded case drawn here once (module docstring). Each seed is taken
    modulo ``2**31 - 1`` first, as TensorFlow's ``_truncate_seed`` does (so -1 and ``2**31`` draw
    TensorFlow's numbers), and (0, 0) after that becomes (0, 2**31 - 1)."""
    g = graph or get_default_graph()
    graph_seed = g.random_seed
    _check_seed(op_seed, "random")
    if graph_seed is None and op_seed is None:
        return tf_random.stream_seeds(0, 0)
    s = DEFAULT_GRAPH_SEED if graph_seed is None else int(graph_seed) % SEED_MODULUS
    s2 = (len(g.nodes) if op_seed is None else int(op_seed)) % SEED_MODULUS
    if s == 0 and s2 == 0:  # (0, 0) means "unseeded" to the kernel: TensorFlow takes (0, 2**31 - 1)
        s2 = SEED_MODULUS
    return s, s2


# ---- the stateful draw ----------------------------------------------------------------------------
def loop_token(ctx: Any, prefix: str) -> tuple[Optional[Tensor], Callable[[Tensor], None]]:
    """A token of the current iteration that the op's counter read waits on, and the function that
    passes the op's assign on as the next iteration's token (None and a no-op outside loops). A
    loop nested in a loop takes its first token from the outer loop's and hands its last on."""
    if ctx is None:
        return None, lambda t: None
    if isinstance(ctx, CondContext):
        if ctx.while_context is not None:
            raise UnsupportedError(f"random: a random op in {ctx.describe()} inside a while_loop is not built: "
                                   "its draws could not be ordered across iterations (draw it in the loop's body, "
                                   "outside the cond, and select with tn.where)")
        return None, lambda t: None
    assert isinstance(ctx, WhileContext)
    if ctx.mode != "body" or ctx.pivot is None:
        raise UnsupportedError(f"random: a random op in the predicate of while_loop \"{ctx.name}\" is not built "
                               "(draw it in the body)")
    g = ctx.graph
    outer, close_outer = loop_token(ctx.outer, prefix)
    if outer is None:  # (made in the loop's own context: in a cond branch it runs only when taken)
        with g._in_context(ctx.outer), g.control_dependencies(None):
            outer = constant(np.int64(0), name=f"{prefix}/sync_init")
    lv = ctx.add_loop_var(outer, f"{prefix}/sync")

    def close(next_value: Tensor) -> None:
        ctx.close_loop_var(lv, next_value, f"{prefix}/sync/next")
        assert lv.exit is not None
        close_outer(lv.exit.outputs[0])

    assert lv.body_input is not None
    return lv.body_input.outputs[0], close


#: how a construction creates a node: (op, inputs, attrs, suffix, static output dims or None) -> Node
Create = Callable[[str, Sequence[Tensor], dict[str, Any], str, Optional[list[int]]], Node]


def draw_part(create: Create, counter: Tensor, shape: Tensor, bounds: Sequence[Tensor], attrs: dict[str, Any],
              dims: Optional[list[int]]) -> tuple[Tensor, Tensor]:
    """One execution of a stateful random op: ``read`` the counter (the handle of an int64 scalar
    Variable, or that handle entered into loop frames), ``RandomDraw`` from it, and ``assign_add``
    the calls the draw reserves. Returns the draw and the assign's output, on which whatever reads
    the draw must wait. Shared by ``stateful_draw`` and the GraphDef importer."""
    handle = counter.node
    while handle.op == "Enter":  # (an imported loop enters the handle, as TensorFlow does)
        handle = handle.inputs[0].node
    var = {"dtype": dt.int64.name, "shape": [], "var_name": handle.attrs["var_name"]}
    read = create("ReadVariable", [counter], var, "read", None).outputs[0]
    drawn = create("RandomDraw", [shape, read, *bounds], attrs, "draw", dims).outputs[0]
    n = create("Size", [drawn], {}, "size", None).outputs[0]
    n64 = create("Cast", [n], {"dtype": dt.int64.name}, "size64", None).outputs[0]
    per = create("Const", [], {"value": np.int64(tf_random.reserved_calls(1)), "dtype": dt.int64.name},
                 "per_output", None).outputs[0]
    reserved = create("Mul", [n64, per], {}, "reserved", None).outputs[0]
    advanced = create("AssignAddVariable", [counter, reserved], var, "advance", None).outputs[0]
    return drawn, advanced


def stateful_draw(distribution: str, shape: Any, dtype: Any, seed: Optional[int], name: str,
                  bounds: Sequence[Tensor] = ()) -> Tensor:
    """One stateful random op built where the graph is being built: its counter Variable, the
    ``draw_part`` (after the loops' token, module docstring), and the draw, waiting on the assign."""
    g = get_default_graph()
    key = get_seed(seed, g)
    d = dt.as_dtype(dtype)
    shp, static = _shape_input(shape, name)
    prefix = g.unique_name(name)
    attrs = {"distribution": distribution, "dtype": d.name, "seed": int(key[0]), "seed2": int(key[1])}

    def create(op: str, inputs: Sequence[Tensor], a: dict[str, Any], suffix: str, dims: Optional[list[int]]) -> Node:
        spec = None if dims is None else [TensorSpec(d, tuple(dims))]
        return g.create_node(op, list(inputs), a, name=f"{prefix}/{suffix}", specs=spec)

    counter = Variable(np.int64(0), name=f"{prefix}/counter", trainable=False)
    token, close = loop_token(g.current_context, prefix)
    with control_dependencies([token.node] if token is not None else []):
        drawn, advanced = draw_part(create, counter.handle, shp, bounds, attrs, static)
    close(advanced)
    with control_dependencies([advanced.node]):
        return identity(drawn, name=prefix)


def _shape_input(shape: Any, name: str) -> tuple[Tensor, Optional[list[int]]]:
    """The shape as an int vector tensor, and its sizes when they are known now."""
    if isinstance(shape, Tensor):
        if shape.dtype not in (dt.int32, dt.int64):
            raise ArgumentError(f"{name}: shape must be an int32 or int64 vector, got a {shape.dtype.name} tensor")
        return shape, None
    try:
        dims = [int(x) for x in shape] if not isinstance(shape, (str, bytes)) else None
        ok = dims is not None and all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in shape)
    except TypeError:
        ok, dims = False, None
    if not ok or dims is None:
        raise ArgumentError(f"{name}: shape must be a list of ints or an int32 vector tensor, got {shape!r}")
    if any(x < 0 for x in dims):
        raise ArgumentError(f"{name}: shape {dims} has a negative dimension")
    if any(x > np.iinfo(np.int32).max for x in dims):
        raise ArgumentError(f"{name}: shape {dims} has a dimension past int32's range")
    return constant(np.asarray(dims, np.int32), name="shape"), dims


def _floating(dtype: Any, name: str) -> dt.DType:
    d = dt.as_dtype(dtype)
    if d not in (dt.float32, dt.float64):
        raise ArgumentError(f"{name}: dtype must be float32 or float64, got {d.name}")
    return d


# ---- the builders -----------------------------------------------------------------------------------
@checked
def uniform(shape: Any, minval: Any = 0, maxval: Any = None, dtype: Any = dt.float32, seed: Optional[int] = None,
            name: Optional[str] = None) -> Tensor:
    """Values uniform in ``[minval, maxval)`` (``maxval`` defaults to 1 for floats), drawn anew at
    each execution: ``tf.random.uniform``, TensorFlow's numbers bit for bit. Floats are
    ``u * (maxval - minval) + minval`` of ``u`` in [0, 1); integers (int32, int64; ``maxval``
    required) are ``minval + word % (maxval - minval)``."""
    d = dt.as_dtype(dtype)
    who = name or "random_uniform"
    if d in (dt.int32, dt.int64):
        if maxval is None:
            raise ArgumentError(f"{who}: an integer draw needs maxval")
        lo, hi = convert_to_tensor(minval, d), convert_to_tensor(maxval, d)
        return stateful_draw("RandomUniformInt", shape, d, seed, who, (lo, hi))
    d = _floating(d, who)
    lo, hi = convert_to_tensor(minval, d), convert_to_tensor(1.0 if maxval is None else maxval, d)
    u = stateful_draw("RandomUniform", shape, d, seed, who)
    return u * (hi - lo) + lo


@checked
def normal(shape: Any, mean: Any = 0.0, stddev: Any = 1.0, dtype: Any = dt.float32, seed: Optional[int] = None,
           name: Optional[str] = None) -> Tensor:
    """Normal values, ``z * stddev + mean``, drawn anew at each execution: ``tf.random.normal``
    (TensorFlow's numbers; float32 ones on the fast backend within a few ulps, docs/random.rst)."""
    who = name or "random_normal"
    d = _floating(dtype, who)
    m, s = convert_to_tensor(mean, d), convert_to_tensor(stddev, d)
    return stateful_draw("RandomStandardNormal", shape, d, seed, who) * s + m


@checked
def truncated_normal(shape: Any, mean: Any = 0.0, stddev: Any = 1.0, dtype: Any = dt.float32,
                     seed: Optional[int] = None, name: Optional[str] = None) -> Tensor:
    """Normal values of magnitude under 2 before scaling, ``z * stddev + mean``, drawn anew at each
    execution: ``tf.random.truncated_normal``."""
    who = name or "truncated_normal"
    d = _floating(dtype, who)
    m, s = convert_to_tensor(mean, d), convert_to_tensor(stddev, d)
    return stateful_draw("TruncatedNormal", shape, d, seed, who) * s + m


__all__ = ["DEFAULT_GRAPH_SEED", "draw_part", "get_seed", "normal", "set_random_seed", "stateful_draw",
           "truncated_normal", "uniform"]
