"""Bad inputs to the rest of the public surface (the Session API, Variables, optimizers, constructors):
each is a Turnout error of one type on every backend, never Python's own exception or a silent drop.

The control-flow builders' arguments are in ``tests/test_bad_inputs.py`` and
``tests/test_only_turnout_errors.py``; this file holds the named regressions of the second round.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from test_bad_inputs import ALL_BACKENDS, session

import turnout as tn
from turnout import serialize, train


@pytest.fixture(params=ALL_BACKENDS)
def any_backend(request: pytest.FixtureRequest) -> str:
    return request.param  # type: ignore[no-any-return]


def _doubling() -> tuple[tn.Graph, tn.Tensor, tn.Tensor]:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [2], name="x")
        y = x * 2.0
    return g, x, y


# ---- feeds ---------------------------------------------------------------------------------------
def test_a_masked_array_feed_is_a_feed_error_on_every_backend(any_backend: str) -> None:
    """A masked array was fed with its mask silently dropped (reference), or reached JAX and raised
    its ``ValueError`` (fast): a tensor holds no mask, so it is refused, every run (not only the first
    of its signature)."""
    g, x, y = _doubling()
    with session(g, any_backend) as s:
        assert list(s.run(y, {x: np.ones(2, np.float32)})) == [2.0, 2.0]
        for _ in range(2):
            with pytest.raises(tn.FeedError, match="masked array"):
                s.run(y, {x: np.ma.array([1.0, 2.0], mask=[0, 1], dtype=np.float32)})


def test_a_masked_array_constant_is_refused() -> None:
    with tn.Graph().as_default(), pytest.raises(tn.GraphBuildError, match="masked array"):
        tn.constant(np.ma.array([1.0, 2.0], mask=[0, 1]))


def test_an_ndarray_subclass_feed_is_its_plain_array(any_backend: str) -> None:
    g, x, y = _doubling()
    with session(g, any_backend) as s:
        got = s.run(y, {x: np.asarray([1.0, 2.0], np.float32).view(np.recarray)})
    assert type(got) is not np.recarray and list(got) == [2.0, 4.0]


@pytest.mark.parametrize("key", ["tensor_array", "variable"])
def test_feeding_a_tensor_array_or_a_variable_names_what_it_is(any_backend: str, key: str) -> None:
    """A TensorArray used as a feed_dict key was refused as if it were a Variable."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        y = x * 2.0
        k = tn.TensorArray(tn.float32, size=2) if key == "tensor_array" else tn.Variable(1.0, name="v")
    word = "is a TensorArray, which cannot be fed" if key == "tensor_array" else "cannot feed Variable 'v'"
    with session(g, any_backend) as s, pytest.raises(tn.FeedError, match=word):
        s.run(y, {x: 1.0, k: 1.0})


# ---- fetches -------------------------------------------------------------------------------------
@pytest.mark.parametrize("fetches", [[], {}, [[], {}], ()], ids=["list", "dict", "nested", "tuple"])
def test_an_empty_fetch_structure_runs_on_every_backend(any_backend: str, fetches: Any) -> None:
    """``run([])`` on the partitioned backend raised ``IndexError`` (no partition had work)."""
    g, x, _ = _doubling()
    with session(g, any_backend) as s:
        assert s.run(fetches, {x: np.ones(2, np.float32)}) == fetches


# ---- optimizers ----------------------------------------------------------------------------------
@pytest.mark.parametrize("make", [train.SGD, train.Adam, lambda v: train.Adam(0.1, beta1=v),
                                  lambda v: train.Adam(0.1, epsilon=v)], ids=["sgd", "adam", "beta1", "epsilon"])
@pytest.mark.parametrize("value", ["abc", None, [1.0], 1j, 2**2000, float("nan"), float("inf"), True],
                         ids=["str", "none", "list", "complex", "huge_int", "nan", "inf", "bool"])
def test_an_optimizer_hyperparameter_that_is_no_finite_number_is_an_argument_error(make: Callable[[Any], Any],
                                                                                   value: Any) -> None:
    with pytest.raises(tn.ArgumentError, match="must be a finite number"):
        make(value)


def _loss() -> tuple[tn.Variable, tn.Tensor]:
    v = tn.Variable(np.ones(2, np.float32), name="v")
    return v, tn.reduce_sum(v.read() * v.read())


@pytest.mark.parametrize("call, words", [
    (lambda v, loss: train.SGD(0.1).minimize(3), "Optimizer.minimize: loss must be"),
    (lambda v, loss: train.SGD(0.1).minimize(None), "Optimizer.minimize: loss must be"),
    (lambda v, loss: train.SGD(0.1).minimize(loss, var_list=3), "var_list must be"),
    (lambda v, loss: train.SGD(0.1).minimize(loss, var_list=[loss]), "var_list must hold Variables"),
    (lambda v, loss: train.SGD(0.1).minimize(loss, var_list=["v"]), "var_list must hold Variables"),
    (lambda v, loss: train.SGD(0.1).apply_gradients([]), "is empty"),
    (lambda v, loss: train.SGD(0.1).apply_gradients([(1, 2)]), "pairs"),
    (lambda v, loss: train.SGD(0.1).apply_gradients([(loss, loss)]), "must hold Variables"),
    (lambda v, loss: train.SGD(0.1).apply_gradients(3), "grads_and_vars must be"),
    (lambda v, loss: train.Adam().minimize(loss, bogus=1), "minimize: got an unexpected keyword"),
], ids=["loss_int", "loss_none", "var_list_int", "var_list_tensor", "var_list_name", "apply_empty",
        "apply_not_pairs", "apply_tensor_as_variable", "apply_int", "unknown_keyword"])
def test_an_optimizer_argument_of_the_wrong_kind_is_an_argument_error(call: Callable[..., Any], words: str) -> None:
    """These reached ``AttributeError``, ``TypeError`` or ``IndexError`` inside ``turnout.train``."""
    with tn.Graph().as_default():
        v, loss = _loss()
        with pytest.raises(tn.ArgumentError, match=words):
            call(v, loss)


# ---- device scopes -------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["cpu-1", "/device:CPU", "cpu:one", "/job:w/device:CPU:0/extra", "  "])
def test_a_device_scope_that_names_no_device_is_refused_where_it_is_written(name: str) -> None:
    """A malformed ``tn.device`` name was refused only by the partitioned backends' placement and
    ignored by every other one, so one graph ran on some backends and failed on others: the scope
    refuses it when it is opened, before any op is made under it."""
    with tn.Graph().as_default() as g:
        with pytest.raises(tn.PlacementError, match="cannot parse device name|non-empty string"):
            with tn.device(name):
                tn.constant(1.0)
        assert not g.nodes


@pytest.mark.parametrize("name", ["cpu:1", "/cpu:0", "GPU:0", "/job:worker/task:1/device:CPU:0",
                                  "/job:worker/replica:0/task:0/device:cpu:2"])
def test_a_device_scope_that_names_a_device_places_its_ops_there(name: str) -> None:
    with tn.Graph().as_default():
        with tn.device(name):
            c = tn.constant(1.0)
    assert c.node.device == name


def test_an_empty_device_name_keeps_the_outer_scope_as_in_tensorflow() -> None:
    with tn.Graph().as_default():
        with tn.device("cpu:1"), tn.device(""):
            inner = tn.constant(1.0)
        with tn.device(""):
            bare = tn.constant(1.0)
    assert (inner.node.device, bare.node.device) == ("cpu:1", None)


def test_a_saved_graph_whose_node_names_no_device_is_a_serialization_error() -> None:
    """A saved graph is outside data: a node's device that placement could not read is refused when
    the file is read, naming the node's field, as ``tn.device`` refuses it when a graph is built."""
    with tn.Graph().as_default() as g:
        with tn.device("cpu:1"):
            tn.constant(1.0, name="c")
    text = serialize.dumps(g)
    assert serialize.loads(text).node("c").device == "cpu:1"
    with pytest.raises(tn.SerializationError, match="device.*cannot parse device name 'cpu-1'"):
        serialize.loads(text.replace('"cpu:1"', '"cpu-1"'))


# ---- constructors and functions called with arguments missing or misspelt ---------------------------
@pytest.mark.parametrize("call, words", [
    (lambda: tn.Variable(), "Variable: missing a required argument: 'initial_value'"),
    (lambda: tn.Variable(1.0, shape=[2]), "Variable: got an unexpected keyword argument 'shape'"),
    (lambda: tn.TensorArray(tn.float32, size=2, bogus=1), "TensorArray: got an unexpected keyword"),
    (lambda: tn.memory_report(), "memory_report: missing a required argument: 'target'"),
], ids=["variable_missing", "variable_unknown", "tensor_array_unknown", "memory_report_missing"])
def test_a_missing_or_unknown_argument_is_an_argument_error(call: Callable[[], Any], words: str) -> None:
    with tn.Graph().as_default(), pytest.raises(tn.ArgumentError, match=words):
        call()


@pytest.mark.parametrize("value", [None, object(), "abc", [[1.0], [1.0, 2.0]], 1j, 2**70, b"ab"],
                         ids=["none", "object", "str", "ragged", "complex", "huge_int", "bytes"])
def test_a_refused_initial_value_is_a_graph_build_error(value: Any) -> None:
    """The error naming the argument used to read the half-made Variable's name: ``AttributeError``."""
    with tn.Graph().as_default(), pytest.raises(tn.GraphBuildError, match="Variable"):
        tn.Variable(value, name="v")


def test_a_float64_to_float32_cast_that_overflows_warns_nowhere(any_backend: str) -> None:
    """The small-step system let numpy's ``RuntimeWarning: overflow encountered in cast`` escape."""
    import warnings

    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float64, [1], name="x")
        y = tn.cast(x, tn.float32)
    with session(g, any_backend) as s, warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        assert np.isinf(s.run(y, {x: [1e300]})[0])


def test_a_path_with_a_nul_byte_is_a_serialization_error() -> None:
    with pytest.raises(tn.SerializationError, match="cannot read"):
        tn.load("\0bad")


def test_checkpoint_save_of_no_session_is_an_argument_error(tmp_path: Any) -> None:
    from turnout import checkpoint

    with pytest.raises(tn.ArgumentError, match="session must be a tn Session"):
        checkpoint.save(3, tmp_path / "ck")


@pytest.mark.parametrize("key", ["nope", 3, None, ["v"]], ids=["name", "int", "none", "list"])
def test_a_variable_looked_up_by_no_name_of_the_graph_is_not_found(any_backend: str, key: Any) -> None:
    """``session.variables[key]`` raised a bare ``KeyError`` (or ``TypeError`` for a list); it is a
    ``NotFoundError``, still a ``KeyError`` so ``in`` and ``get`` keep working."""
    g = tn.Graph()
    with g.as_default():
        tn.Variable(np.zeros(2, np.float32), name="v")
    with session(g, any_backend) as s:
        with pytest.raises(tn.NotFoundError, match="no Variable of this graph is named"):
            s.variables[key]
        with pytest.raises(tn.NotFoundError):
            del s.variables[key]
        assert s.variables.get(key) is None and key not in s.variables

