"""Only Turnout errors: the classes of input where a raw numpy, JAX, MLIR, protobuf or Python error used
to reach the user, each fixed where its kind of value enters, and a property that no exception but a
``TurnoutError`` ever leaves ``Session.run``, ``tn.load``, ``tn.import_graph_def``,
``tn.checkpoint.read``/``restore`` or ``read_events``.

Where each kind of value enters, and what it now gives:

* a predicate, at run time (a Switch or LoopCond reading a value whose static shape was unknown):
  ``KernelError`` "the predicate must be a scalar bool" on every backend (``kernels.truth``; the fast
  backend's ``Emitter.predicate``), only where the Switch runs;
* a size from an attribute (``tile``'s multiples, ``reshape``'s target): ``ShapeError`` when built
  (``shape_rules._no_negative_size`` after every rule);
* an allocation: a TensorArray's whole capacity meets ``max_tensor_bytes`` once its element shape is
  known, on every backend (``kernels.check_ta_capacity``);
* a session's arguments and run options: ``ArgumentError`` naming the parameter;
* every field of a loaded file: ``SerializationError`` (or ``GraphBuildError`` for a GraphDef whose
  message parses but whose nodes hold what no TensorFlow writes).

The fuzzers draw from the ``ci`` hypothesis profile in the default run (derandomized) and from
``TURNOUT_HYPOTHESIS_PROFILE=nightly`` for long runs.
"""

from __future__ import annotations

import json
import os
import re
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import graphs
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from programs import build
from strategies import byte_mutations, programs

import turnout as tn
from turnout import checkpoint, serialize
from turnout.errors import TurnoutError
from turnout.session import BACKENDS

#: every in-process backend (Ray needs a cluster)
ALL_BACKENDS = sorted(b for b in BACKENDS if b != "ray")


def session(g: tn.Graph, backend: str) -> tn.Session:
    """A session of ``backend``; a partitioned one spreads the nodes over two devices."""
    if backend not in ("partitioned", "fast-partitioned"):
        return tn.Session(g, backend=backend)
    devices = ["cpu:0", "cpu:1"]
    return tn.Session(g, backend=backend, devices=devices,
                      requests={n.name: devices[k % 2] for k, n in enumerate(g.nodes)})


def run(g: tn.Graph, backend: str, fetch: Any, feeds: Any = None) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the fast backend's fallback notice
        with session(g, backend) as s:
            return s.run(fetch, feeds)


# ---- a loop variable that is a vector advanced by one ----------------------------------------------
@pytest.mark.parametrize("backend", ALL_BACKENDS)
@pytest.mark.parametrize("bound", ["constant", "fed", "maximum_iterations"])
def test_a_vector_advanced_by_one_is_not_an_iteration_counter(backend: str, bound: str) -> None:
    """A decoder's per-row step counts (``v + 1`` on an int32 vector) are loop variables like any
    other: the counted-loop analysis takes only int32 *scalars* for counters. Closed form: after
    ``k`` bodies the vector is ``start + k``."""
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")
        limit = n if bound == "fed" else tn.constant(10 if bound == "maximum_iterations" else 3)
        kw = {"maximum_iterations": 3} if bound == "maximum_iterations" else {}
        i, v = tn.while_loop(lambda i, v: i < limit, lambda i, v: [i + 1, v + 1],
                             [tn.constant(0), tn.constant([1, 2, 3, 4, 5])], **kw)
        # a vector that starts at zero, beside the counter, advanced the same way
        j, w = tn.while_loop(lambda j, w: j < 4, lambda j, w: [j + 1, w + 1], [tn.constant(0), tn.zeros([3], tn.int32)])
    got = run(g, backend, [v, i, w, j], {n: np.int32(3)})
    np.testing.assert_array_equal(got[0], [4, 5, 6, 7, 8])
    assert int(got[1]) == 3
    np.testing.assert_array_equal(got[2], [4, 4, 4])
    assert int(got[3]) == 4


# ---- a predicate that is not one boolean ------------------------------------------------------------
def _vector_predicates() -> dict[str, Callable[[tn.Tensor], list[tn.Tensor]]]:
    """Programs whose predicate ``p`` (fed, static shape unknown) reaches a Switch or a LoopCond."""
    def cond(p: tn.Tensor) -> list[tn.Tensor]:
        x = tn.constant(1.0)
        return [tn.cond(p, lambda: x + 1.0, lambda: x - 1.0)]

    def raw_switch(p: tn.Tensor) -> list[tn.Tensor]:
        f, t = tn.raw.switch(tn.constant(1.0), p)
        return [tn.raw.merge([f, t])[0]]

    def loop(p: tn.Tensor) -> list[tn.Tensor]:
        return [tn.while_loop(lambda i: tn.logical_and(p, i < 3), lambda i: i + 1, [tn.constant(0)])]

    def cond_in_loop(p: tn.Tensor) -> list[tn.Tensor]:
        return [tn.while_loop(lambda i, s: i < 2,
                              lambda i, s: [i + 1, tn.cond(p, lambda: s + 1.0, lambda: s)],
                              [tn.constant(0), tn.constant(0.0)])[1]]

    return {"cond": cond, "raw_switch": raw_switch, "loop": loop, "cond_in_loop": cond_in_loop}


@pytest.mark.parametrize("backend", ALL_BACKENDS)
@pytest.mark.parametrize("kind", sorted(_vector_predicates()))
def test_a_predicate_fed_a_vector_is_a_kernel_error(backend: str, kind: str) -> None:
    g = tn.Graph()
    with g.as_default():
        p = tn.placeholder(tn.bool, shape=None, name="p")
        fetch = _vector_predicates()[kind](p)
    with pytest.raises(tn.KernelError, match=r"predicate must be a scalar bool, got a value of shape \(2,\)"):
        run(g, backend, fetch, {p: np.array([True, False])})
    # the same program with a scalar runs
    run(g, backend, fetch, {p: np.bool_(True)})


@pytest.mark.parametrize("backend", ALL_BACKENDS)
def test_a_vector_predicate_on_a_branch_not_taken_is_no_error(backend: str) -> None:
    """[E-Switch-Dead]: a Switch whose predicate is dead never reads it, so a cond nested in the branch
    not taken may hold any predicate; the check is made only where the Switch runs."""
    g = tn.Graph()
    with g.as_default():
        outer = tn.placeholder(tn.bool, [], name="outer")
        p = tn.placeholder(tn.bool, shape=None, name="p")
        x = tn.constant(2.0)
        y = tn.cond(outer, lambda: tn.cond(p, lambda: x * 3.0, lambda: x), lambda: x - 1.0)
    assert float(run(g, backend, y, {outer: np.bool_(False), p: np.array([True, True])})) == 1.0
    with pytest.raises(tn.KernelError, match="predicate must be a scalar bool"):
        run(g, backend, y, {outer: np.bool_(True), p: np.array([True, True])})


# ---- sizes --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("build", [
    lambda x: tn.tile(x, [-2]),
    lambda x: tn.reshape(x, [-3]),
    lambda x: tn.reshape(x, [2, -2]),
    lambda x: tn.zeros([-1]),
], ids=["tile", "reshape", "reshape2", "zeros"])
@pytest.mark.parametrize("known", [True, False])
def test_a_negative_size_from_an_attribute_is_refused_when_built(build: Callable[[Any], Any], known: bool) -> None:
    """A size an attribute gives is known when the graph is built: a negative one is refused there,
    whether or not the input's shape is known, before it could reach numpy or XLA."""
    g = tn.Graph()
    with g.as_default():
        x = tn.constant([1.0, 2.0]) if known else tn.placeholder(tn.float32, None)
        with pytest.raises(tn.GraphBuildError, match="-1|-2|-3|negative"):
            build(x)


@pytest.mark.parametrize("backend", ALL_BACKENDS)
@pytest.mark.parametrize("declared", [True, False, "partly"])
def test_a_tensor_array_over_the_allocation_guard_is_refused_on_every_backend(backend: str, declared: Any) -> None:
    """2**23 slots of [64] float32 (2 GiB, over the default guard of 1 GiB): the guard counts a
    TensorArray's whole capacity once its element shape is known (declared, or fixed by the first
    write), so a compiled backend, which allocates every slot at once, and the interpreters give the
    same ``ResourceExhaustedError``."""
    g = tn.Graph()
    with g.as_default():
        shape = {True: [64], False: None, "partly": [None]}[declared]
        ta = tn.TensorArray(tn.float32, size=2**23, element_shape=shape)
        y = ta.write(0, tn.zeros([64])).read(0)
    with pytest.raises(tn.ResourceExhaustedError, match="TensorArray.*max_tensor_bytes"):
        run(g, backend, y)


# ---- a session's arguments ------------------------------------------------------------------------------
def _graph() -> tuple[tn.Graph, tn.Tensor, tn.Tensor]:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        y = x * 2.0
    return g, x, y


@pytest.mark.parametrize("kwargs, word", [
    ({"backend": ["fast"]}, "backend"),
    ({"backend": 3}, "backend"),
    ({"backend": None}, "backend"),
    ({"backend": "fsat"}, "backend"),
    ({"backend": "fast", "fallbak": True}, "fallbak"),
    ({"backend": "reference", "fallback": True}, "fallback"),
    ({"backend": "fast", "fallback": "yes"}, "fallback"),
    ({"backend": "fast", "stack_chunk": -1}, "stack_chunk"),
])
def test_a_malformed_session_argument_is_an_argument_error(kwargs: dict[str, Any], word: str) -> None:
    g, _, _ = _graph()
    with pytest.raises(tn.ArgumentError, match=word):
        tn.Session(g, **kwargs)
    with pytest.raises(tn.ArgumentError, match="graph"):
        tn.Session(3)  # type: ignore[arg-type]


@pytest.mark.parametrize("backend", ["reference", "fast"])
@pytest.mark.parametrize("kw, word", [
    ({"max_iteratons": 3}, "max_iteratons"),
    ({"timeout": 1}, "timeout"),
    ({"max_tensor_bytes": -1}, "max_tensor_bytes"),
    ({"max_tensor_bytes": "big"}, "max_tensor_bytes"),
    ({"max_iterations": 1.5}, "max_iterations"),
    ({"scheduler": ["fifo"]}, "scheduler"),
    ({"seed": "one"}, "seed"),
    ({"trace": "yes"}, "trace"),
])
def test_a_malformed_run_option_is_an_argument_error(backend: str, kw: dict[str, Any], word: str) -> None:
    g, x, y = _graph()
    s = tn.Session(g, backend=backend)
    with pytest.raises(tn.ArgumentError, match=word):
        s.run(y, {x: 1.0}, **kw)
    with pytest.raises(tn.ArgumentError, match=word):
        s.run(y, {x: 1.0}, options=kw)
    with pytest.raises(tn.ArgumentError, match="options"):
        s.run(y, {x: 1.0}, options="fast")
    assert float(s.run(y, {x: 1.0})) == 2.0  # the session still works


# ---- loaded files: named regressions --------------------------------------------------------------------
@pytest.mark.parametrize("shape", [[2**40, 2**40, 0], [2**63 - 1, 0], [0, 2**62, 2**62]])
def test_a_loaded_constant_declaring_huge_dimensions_beside_a_zero_is_refused(shape: list[int]) -> None:
    g = tn.Graph()
    with g.as_default():
        tn.constant(np.zeros((2, 0), np.float32))
    text = serialize.dumps(g).replace("[2, 0]", json.dumps(shape).replace(",", ", "))
    assert json.dumps(shape).replace(",", ", ") in text
    with pytest.raises(tn.SerializationError, match="too large to index"):
        serialize.loads(text)


def test_a_missing_file_is_a_serialization_error(tmp_path: Path) -> None:
    from turnout.graphdef.events import read_events

    missing = tmp_path / "nothing_here"
    for read in (tn.load, checkpoint.read, checkpoint.read_tf, tn.import_graph_def, read_events):
        with pytest.raises(tn.SerializationError, match="nothing_here"):
            read(missing)  # type: ignore[operator]
    with pytest.raises(tn.SerializationError):
        tn.load(tmp_path)  # a directory


# ---- fuzzing the loaders --------------------------------------------------------------------------------
_FUZZ = settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large], deadline=None)




def _only_turnout_errors(call: Callable[[], Any]) -> Any:
    try:
        return call()
    except TurnoutError:
        return None


#: JSON values of every kind, some huge, to put in any field of a serialized graph
_ODD_JSON = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70),
                      st.sampled_from([2**63 - 1, -1, 0, 2**31]),
                      st.floats(allow_nan=False), st.text(max_size=8), st.lists(st.integers(-3, 2**40), max_size=4),
                      st.dictionaries(st.text(max_size=4), st.integers(), max_size=2))


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value inside a JSON document."""
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for k, v in enumerate(doc):
            out += _paths(v, (*prefix, k))
    return out


def _replaced(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(doc, dict):
        return {k: (_replaced(v, rest, value) if k == head else v) for k, v in doc.items()}
    return [(_replaced(v, rest, value) if k == head else v) for k, v in enumerate(doc)]


def _run_loaded(g: tn.Graph) -> None:
    """A loaded graph runs to a value or to a Turnout error (never a raw one, never a hang)."""
    fetch = [t for n in g.nodes for t in n.outputs][-1:]
    feeds = {t: np.ones([d or 1 for d in (t.shape or ())], t.dtype.numpy)
             for n in g.nodes if n.op == "Placeholder" for t in n.outputs if not t.dtype.is_opaque}
    _only_turnout_errors(lambda: tn.Session(g).run(fetch, feeds, max_seconds=2.0, max_tensor_bytes=2**24))


@_FUZZ
@given(data=st.data())
def test_fuzzed_serialized_graphs_give_only_turnout_errors(data: st.DataObject) -> None:
    text = serialize.dumps(graphs.every_kind_of_node())
    if data.draw(st.booleans()):
        raw = data.draw(byte_mutations(text.encode("utf-8")))
        g = _only_turnout_errors(lambda: serialize.loads(raw))
    else:  # a field of the wrong kind or size, anywhere in the document
        doc = json.loads(text)
        path = data.draw(st.sampled_from(_paths(doc)[1:]))
        g = _only_turnout_errors(lambda: serialize.loads(json.dumps(_replaced(doc, path, data.draw(_ODD_JSON)))))
    if g is not None:
        _run_loaded(g)


def _graph_def_bytes() -> bytes:
    pytest.importorskip("google.protobuf")
    return bytes(tn.export_graph_def(graphs.every_kind_of_node()).graph_def.SerializeToString())


@_FUZZ
@given(data=st.data())
def test_fuzzed_graph_defs_give_only_turnout_errors(data: st.DataObject) -> None:
    raw = data.draw(byte_mutations(_graph_def_bytes()))
    got = _only_turnout_errors(lambda: tn.import_graph_def(raw))
    if got is not None:
        _run_loaded(got.graph)


@_FUZZ
@given(data=st.data())
def test_graph_defs_with_fields_of_every_wrong_kind_give_only_turnout_errors(data: st.DataObject) -> None:
    """Structural mutations of a well-formed message: dangling inputs, duplicate names, a cycle,
    a node's op or attrs replaced by another node's."""
    from turnout.graphdef import protos

    gd = protos.pb().graph_pb2.GraphDef.FromString(_graph_def_bytes())
    nodes = list(gd.node)
    k = data.draw(st.integers(0, len(nodes) - 1))
    other = nodes[data.draw(st.integers(0, len(nodes) - 1))]
    nd = gd.node[k]
    kind = data.draw(st.sampled_from(["dangling", "duplicate", "cycle", "op", "attrs", "drop_attr", "input_index"]))
    if kind == "dangling":
        nd.input.append("no_such_node:0")
    elif kind == "duplicate":
        nd.name = other.name
    elif kind == "cycle":
        other.input.append(nd.name)
        nd.input.append(other.name)
    elif kind == "op":
        nd.op = other.op
    elif kind == "attrs":
        nd.attr.clear()
        for key, val in other.attr.items():
            nd.attr[key].CopyFrom(val)
    elif kind == "drop_attr" and nd.attr:
        del nd.attr[data.draw(st.sampled_from(sorted(nd.attr)))]
    elif nd.input:
        nd.input[0] = nd.input[0].split(":")[0] + f":{data.draw(st.integers(1, 2**31 - 1))}"
    got = _only_turnout_errors(lambda: tn.import_graph_def(gd.SerializeToString()))
    if got is not None:
        _run_loaded(got.graph)


@_FUZZ
@given(data=st.data())
def test_fuzzed_checkpoints_give_only_serialization_errors(data: st.DataObject, tmp_path_factory: Any) -> None:
    g = graphs.every_kind_of_node()
    s = tn.Session(g)
    d = tmp_path_factory.mktemp("ckpt")
    path = os.path.join(d, "model.ckpt")
    checkpoint.save(s, path)
    with open(path, "rb") as f:
        good = f.read()
    with open(path, "wb") as f:
        f.write(data.draw(byte_mutations(good)))
    _only_turnout_errors(lambda: checkpoint.restore(s, path))


@_FUZZ
@given(data=st.data())
def test_fuzzed_event_files_give_only_serialization_errors(data: st.DataObject, tmp_path_factory: Any) -> None:
    pytest.importorskip("google.protobuf")
    from turnout.graphdef.events import EventWriter, read_events

    d = tmp_path_factory.mktemp("events")
    with EventWriter(str(d)) as w:
        w.add_scalar("loss", 1.5, 0)
        w.add_scalar("loss", 0.5, 1)
    path = next(Path(d).iterdir())
    path.write_bytes(data.draw(byte_mutations(path.read_bytes())))
    _only_turnout_errors(lambda: read_events(path))


# ---- generated programs fed bad values: only Turnout errors leave Session.run -----------------------
#: values of every kind a careless caller feeds
_BAD_FEEDS = st.one_of(
    st.sampled_from([np.array([True, False]), np.array([1, 2, 3], np.int32), np.zeros((2, 2), np.float32),
                     np.array(np.nan), np.array(2**40), "1", None, [], [[1], [2, 3]], object(), 1.5, -(2**31),
                     np.array([], np.float32), b"x", {"a": 1}, complex(1, 2)]),
    st.integers(-(2**70), 2**70), st.floats())


# a third of the profile's examples (each runs a generated program): 33 in ``ci``, 1,666 in ``nightly``
@settings(max_examples=max(30, settings.default.max_examples // 3), deadline=None,
          suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_generated_programs_fed_bad_values_raise_only_turnout_errors(data: st.DataObject) -> None:
    p = data.draw(programs(max_depth=2))
    b = build(p)
    backend = data.draw(st.sampled_from(ALL_BACKENDS))
    feeds: dict[Any, Any] = {}
    for t in b.placeholders.values():
        feeds[t] = data.draw(_BAD_FEEDS) if data.draw(st.booleans()) else np.zeros(
            [1 if d is None else d for d in (t.shape or ())], t.dtype.numpy)
    try:
        run(b.graph, backend, b.fetches, feeds)
    except TurnoutError:
        pass


# ---- every public function called with arguments of the wrong kind ---------------------------------
class _Wrong:
    """An object of a kind no parameter of Turnout accepts."""

    def __repr__(self) -> str:
        return "<wrong kind>"


#: values of other kinds, tried in order against a parameter whose annotation can be checked
_OTHER_KINDS: list[Any] = [3, "x", 1.5, [1], None, True]


def _public_functions() -> list[tuple[str, Callable[..., Any]]]:
    import inspect

    from test_api_docs import public_names

    import turnout.devices
    import turnout.fast

    out = []
    for prefix, mod, names in (("tn", tn, public_names()), ("tn.raw", tn.raw, tn.raw.__all__),
                               ("tn.random", tn.random, ["uniform", "normal", "truncated_normal", "set_random_seed"]),
                               ("tn.nn", tn.nn, ["dropout"]),
                               ("turnout.fast", turnout.fast, turnout.fast.__all__),
                               ("turnout.devices", turnout.devices, turnout.devices.__all__)):
        for n in names:
            f = getattr(mod, n)
            if inspect.isfunction(f):
                out.append((f"{prefix}.{n}", f))
    return out


def _wrong_kind_table() -> list[tuple[str, str, Any]]:
    """(function, parameter, wrong value) for every parameter of every public function: an object of
    no kind, and, where the parameter's annotation can be checked (``turnout.arguments.kind_test``),
    a plain value of another kind."""
    import inspect
    import typing

    from turnout.arguments import kind_test

    rows = []
    for fname, f in _public_functions():
        try:
            hints = typing.get_type_hints(f)
        except Exception:  # noqa: BLE001
            hints = {}
        for p in inspect.signature(f).parameters.values():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                continue
            rows.append((fname, p.name, _Wrong()))
            test = kind_test(hints[p.name]) if p.name in hints else None
            other = next((v for v in _OTHER_KINDS if test is not None and not test(v)), None)
            if test is not None and other is not None:
                rows.append((fname, p.name, other))
    return rows


_TABLE = _wrong_kind_table()


@pytest.mark.parametrize("fname, param, value", _TABLE, ids=[f"{f}-{p}-{type(v).__name__}" for f, p, v in _TABLE])
def test_every_public_function_refuses_an_argument_of_the_wrong_kind(fname: str, param: str, value: Any) -> None:
    """Only Turnout errors leave a public function given an argument of the wrong kind; where the
    parameter's annotation says its kind, it is refused at the call with ``ArgumentError`` naming the
    parameter. The other required parameters get a float tensor of the graph being built."""
    import inspect
    import typing

    from turnout.arguments import kind_test

    f = dict(_public_functions())[fname]
    sig = inspect.signature(f)
    try:
        hints = typing.get_type_hints(f)
    except Exception:  # noqa: BLE001
        hints = {}
    g = tn.Graph()
    with g.as_default(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        x = tn.placeholder(tn.float32, [2], name="x")
        fillers = [x, "n", 1, 1.0, [x], True, lambda: x, {}, g]
        args: dict[str, Any] = {}
        for q in sig.parameters.values():
            if q.kind in (q.VAR_POSITIONAL, q.VAR_KEYWORD):
                continue
            if q.name == param:
                args[q.name] = value
            elif q.default is inspect.Parameter.empty:
                test = kind_test(hints[q.name]) if q.name in hints else None
                args[q.name] = next((v for v in fillers if test is None or test(v)), x)
        positional = [args.pop(q.name) for q in sig.parameters.values()
                      if q.kind == q.POSITIONAL_ONLY and q.name in args]
        try:
            f(*positional, **args)
        except TurnoutError as e:
            named = re.match(r"\w+: (\w+) must be ", str(e))
            if isinstance(e, tn.ArgumentError) and named:  # the parameter given the wrong kind, or one
                assert named.group(1) == param or named.group(1) in args  # the table could not fill
        # (no error: the function takes values of any kind there, e.g. a name made with str())


@pytest.mark.parametrize("build, param", [
    (lambda x, w: tn.tanh(w), "x of tanh"),
    (lambda x, w: tn.add(x, w), "b of add"),
    (lambda x, w: x + w, "b of add"),
    (lambda x, w: tn.matmul(x, w), "b of matmul"),
    (lambda x, w: tn.raw.switch(w, x > 0.0), "data of switch"),
    (lambda x, w: tn.gather(x, w), "indices of gather"),
    (lambda x, w: tn.reduce_sum(w), "x of reduce_sum"),
    (lambda x, w: tn.cond(x[0] > 0.0, lambda: w, lambda: x), None),
], ids=["tanh", "add", "operator", "matmul", "switch", "gather", "reduce_sum", "cond"])
def test_an_operand_of_no_kind_is_named_by_its_parameter(build: Callable[..., Any], param: str | None) -> None:
    """A value that is no tensor, given where a builder converts a tensor, is a ``GraphBuildError``
    naming the parameter of the function the user called, not of a function it calls inside
    (``turnout.arguments``: the outermost checked function names it)."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [2], name="x")
        with pytest.raises(tn.GraphBuildError) as info:
            build(x, _Wrong())
    if param is not None:
        assert str(info.value).endswith(f"(argument {param})")
    assert "<wrong kind>" in str(info.value)


def test_a_loaded_array_whose_shape_is_null_is_refused() -> None:
    """Found by the ``dev`` profile of the serialized-graph fuzzer: an ndarray attribute whose shape
    is null (an unknown rank, which only a declared tensor may have) reached an ``assert``."""
    g = tn.Graph()
    with g.as_default():
        tn.constant(np.zeros((2, 0), np.float32))
    doc = json.loads(serialize.dumps(g))
    path = next(p for p in _paths(doc) if p[-2:] == ("ndarray", "shape"))
    with pytest.raises(tn.SerializationError, match="shape must be a list of dimensions, got null"):
        serialize.loads(json.dumps(_replaced(doc, path, None)))
