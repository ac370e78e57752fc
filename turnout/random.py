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
from turnout.random_categorical import LOGIT_DTYPES, SAMPLE_DTYPES, Create, categorical_part, reserved_outputs
from turnout.random_samplers import log_uniform_part, per_sample
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


def draw_part(create: Create, counter: Tensor, shape: Tensor, bounds: Sequence[Tensor], attrs: dict[str, Any],
              dims: Optional[list[int]]) -> tuple[Tensor, Tensor]:
    """One execution of a stateful random op that is one draw: ``RandomDraw`` from the counter's
    read, in ``execution``; the counter moves 256 calls for each value drawn. Shared by
    ``stateful_draw`` and the GraphDef importer."""
    def draw(read: Tensor) -> Tensor:
        return create("RandomDraw", [shape, read, *bounds], attrs, "draw", dims).outputs[0]

    return execution(create, counter, draw, lambda d: create("Size", [d], {}, "size", None).outputs[0])


def execution(create: Create, counter: Tensor, body: Callable[[Tensor], Tensor],
              outputs: Callable[[Tensor], Tensor]) -> tuple[Tensor, Tensor]:
    """One execution of a stateful random op: ``read`` the counter (the handle of an int64 scalar
    Variable, or that handle entered into loop frames), compute the op's value from it (``body``,
    given the read: the Philox call its draws start at), and ``assign_add`` the calls the execution
    reserves, 256 for each of ``outputs(value)`` (an int32 scalar). The advance is computed from the
    value, so it waits on the value and so on the counter's read, in every executor and in
    TensorFlow's run of an export (where nothing else orders a Variable's read and its update).
    Returns the value and the assign's output, on which whatever reads the value must wait."""
    handle = counter.node
    while handle.op == "Enter":  # (an imported loop enters the handle, as TensorFlow does)
        handle = handle.inputs[0].node
    var = {"dtype": dt.int64.name, "shape": [], "var_name": handle.attrs["var_name"]}
    read = create("ReadVariable", [counter], var, "read", None).outputs[0]
    value = body(read)
    n64 = create("Cast", [outputs(value)], {"dtype": dt.int64.name}, "size64", None).outputs[0]
    per = create("Const", [], {"value": np.int64(tf_random.reserved_calls(1)), "dtype": dt.int64.name},
                 "per_output", None).outputs[0]
    reserved = create("Mul", [n64, per], {}, "reserved", None).outputs[0]
    advanced = create("AssignAddVariable", [counter, reserved], var, "advance", None).outputs[0]
    return value, advanced


def stateful_draw(distribution: str, shape: Any, dtype: Any, seed: Optional[int], name: str,
                  bounds: Sequence[Tensor] = ()) -> Tensor:
    """One stateful random op built where the graph is being built: ``draw_part`` in
    ``_stateful``."""
    d = dt.as_dtype(dtype)
    shp, static = _shape_input(shape, name)

    def part(create: Create, counter: Tensor, attrs: dict[str, Any]) -> tuple[Tensor, Tensor]:
        return draw_part(create, counter, shp, bounds, {"distribution": distribution, "dtype": d.name, **attrs},
                         static)

    return _stateful(part, seed, name)


def _stateful(part: Callable[[Create, Tensor, dict[str, Any]], tuple[Any, Tensor]], seed: Optional[int],
              name: str) -> Any:
    """A stateful random op's counter Variable, ``part`` (its read, its draw, its advance: after the
    loops' token, module docstring, with the op's seeds as attrs), and its value (a tensor, or a tuple
    of them for an op of several outputs), each waiting on the assign."""
    g = get_default_graph()
    key = get_seed(seed, g)
    prefix = g.unique_name(name)

    def create(op: str, inputs: Sequence[Tensor], a: dict[str, Any], suffix: str, dims: Optional[list[int]]) -> Node:
        spec = None if dims is None or op != "RandomDraw" else [TensorSpec(dt.as_dtype(a["dtype"]), tuple(dims))]
        return g.create_node(op, list(inputs), a, name=f"{prefix}/{suffix}", specs=spec)

    counter = Variable(np.int64(0), name=f"{prefix}/counter", trainable=False)
    token, close = loop_token(g.current_context, prefix)
    with control_dependencies([token.node] if token is not None else []):
        value, advanced = part(create, counter.handle, {"seed": int(key[0]), "seed2": int(key[1])})
    close(advanced)
    with control_dependencies([advanced.node]):
        if isinstance(value, tuple):
            return tuple(identity(v, name=f"{prefix}/out{k}") for k, v in enumerate(value))
        return identity(value, name=prefix)


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


@checked
def categorical(logits: Any, num_samples: Any, dtype: Any = dt.int64, seed: Optional[int] = None,
                name: Optional[str] = None) -> Tensor:
    """Class indices drawn from the categorical distributions whose unnormalised log-probabilities
    are the rows of ``logits`` (``[batch, classes]``, float32 or float64): ``num_samples`` of them a
    row (an int or an int32 scalar tensor), ``[batch, num_samples]`` of ``dtype`` (int64 or int32),
    drawn anew at each execution: ``tf.random.categorical`` (``tf.multinomial``), TensorFlow's
    ``Multinomial`` with TensorFlow's numbers (``turnout.random_categorical``). A non-finite logit's
    class is never drawn; a row of none but non-finite logits gives ``classes``, as TensorFlow's
    kernel does."""
    who = name or "categorical"
    x = convert_to_tensor(logits)
    if x.dtype.name not in LOGIT_DTYPES:
        raise ArgumentError(f"{who}: logits must be float32 or float64, got {x.dtype.name}")
    if x.shape is not None and len(x.shape) != 2:
        raise ArgumentError(f"{who}: logits must be a matrix [batch, classes], got shape {list(x.shape)}")
    if x.shape is not None and x.shape[1] == 0:
        raise ArgumentError(f"{who}: logits must have at least one class, got shape {list(x.shape)}")
    out = dt.as_dtype(dtype)
    if out.name not in SAMPLE_DTYPES:
        raise ArgumentError(f"{who}: dtype must be int32 or int64, got {out.name}")
    count = _sample_count(num_samples, who)
    known = None if x.shape is None or x.shape[0] is None or not _is_int(num_samples) else [x.shape[0], num_samples]

    def part(create: Create, counter: Tensor, seeds: dict[str, Any]) -> tuple[Tensor, Tensor]:
        return execution(create, counter, lambda read: categorical_part(create, read, x, count, out.name, seeds, known),
                         lambda samples: reserved_outputs(create, samples))

    return _stateful(part, seed, who)


@checked
def log_uniform_candidate_sampler(true_classes: Any, num_true: int, num_sampled: int, unique: bool, range_max: int,
                                  seed: Optional[int] = None,
                                  name: Optional[str] = None) -> tuple[Tensor, Tensor, Tensor]:
    """Classes drawn from the log-uniform (Zipfian) distribution over ``[0, range_max)``, class ``c``
    with probability ``log((c + 2) / (c + 1)) / log(range_max + 1)``:
    ``tf.random.log_uniform_candidate_sampler``, the negative classes of ``tf.nn.nce_loss`` and
    ``sampled_softmax_loss``, with TensorFlow's numbers, drawn anew at each execution
    (``turnout.random_samplers``). Returns ``(sampled_candidates``, int64
    ``[num_sampled]``; ``true_expected_count``, float32 shaped as ``true_classes`` (an int64 ``[batch,
    num_true]``); ``sampled_expected_count``, float32 ``[num_sampled])``; with ``unique`` the samples
    are distinct and the counts those of the tries it took. Nothing flows back through them."""
    who = name or "log_uniform_candidate_sampler"
    classes = convert_to_tensor(true_classes)
    if classes.dtype != dt.int64:
        raise ArgumentError(f"{who}: true_classes must be int64, got {classes.dtype.name}")
    if classes.shape is not None and len(classes.shape) != 2:
        raise ArgumentError(f"{who}: true_classes must be a matrix [batch, num_true], got shape {list(classes.shape)}")
    for arg, v, low in (("num_true", num_true, 1), ("num_sampled", num_sampled, 1), ("range_max", range_max, 1)):
        if not _is_int(v) or not low <= int(v) < 2**31:
            raise ArgumentError(f"{who}: {arg} must be an int in [{low}, 2**31), got {v!r}")
    if classes.shape is not None and classes.shape[1] is not None and classes.shape[1] != num_true:
        raise ArgumentError(f"{who}: true_classes has {classes.shape[1]} columns, num_true is {num_true}")
    if not isinstance(unique, bool):
        raise ArgumentError(f"{who}: unique must be a bool, got {unique!r}")
    if unique and num_sampled > range_max:
        raise ArgumentError(f"{who}: Sampler's range is too small: {num_sampled} unique samples of {range_max} classes")

    def part(create: Create, counter: Tensor, attrs: dict[str, Any]) -> tuple[Any, Tensor]:
        counts: list[Tensor] = []

        def body(read: Tensor) -> Tensor:
            sampled, true_count, sampled_count = log_uniform_part(read, classes, num_true, num_sampled, unique,
                                                                  range_max, attrs)
            counts.extend([true_count, sampled_count])
            return sampled

        sampled, advanced = execution(create, counter, body, lambda s: per_sample(create, s))
        return (sampled, *counts), advanced

    return _stateful(part, seed, who)  # type: ignore[no-any-return]


def _is_int(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def _sample_count(num_samples: Any, who: str) -> Tensor:
    """``num_samples`` as an int32 scalar tensor: a Python int >= 0, or a tensor of that type."""
    if _is_int(num_samples):
        if not 0 <= int(num_samples) <= np.iinfo(np.int32).max:
            raise ArgumentError(f"{who}: num_samples must be an int in [0, 2**31), got {num_samples!r}")
        return constant(np.int32(num_samples), name="num_samples")
    if not isinstance(num_samples, Tensor) or num_samples.dtype != dt.int32 or (
            num_samples.shape is not None and num_samples.shape != ()):
        raise ArgumentError(f"{who}: num_samples must be an int or an int32 scalar tensor, got {num_samples!r}")
    return num_samples


__all__ = ["DEFAULT_GRAPH_SEED", "categorical", "draw_part", "execution", "log_uniform_candidate_sampler",
           "get_seed", "normal", "set_random_seed", "stateful_draw", "truncated_normal", "uniform"]
