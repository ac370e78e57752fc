"""Cases of the kind TensorFlow's and JAX's control-flow test suites pin, and the bugs they found.

The closed-form cases (``CASES``) are written here from the behaviour those suites check
(``control_flow_ops_py_test``, ``tensor_array_ops_test``, ``functional_ops_test``, ``map_fn_test``,
``scan_ops_test``, JAX's ``lax_control_flow_test``), not copied: loop variables that are namedtuples
and nested dicts, TensorFlow's ``foldl``/``foldr`` values, a reversed scan without an initializer,
``map_fn`` that changes dtype, a TensorArray read twice and differentiated, one grown past its size,
``case`` out of range falling to its default, gradients of a loop through ``stop_gradient`` and past
a ``back_prop=False`` loop. Each runs on the routes of
``tests/test_closed_forms.py`` (``case_routes``).

The bug tests below them each name what was wrong; every one ended in a Turnout error, or in the
right value, after its fix:

* ``tn.scan`` of a fed scalar: the fast backend's stand-in for the refused unstack was a bare array
  where a TensorArray was due (Python's ``AttributeError`` while tracing);
* a ``tn.cond`` whose branches return TensorArrays of two dtypes, or a loop body that returns
  another dtype's TensorArray: accepted, the result typed as one array while holding the other's
  values;
* ``tn.case`` with TensorFlow's other forms of ``branch_fns`` (a dict, ``(index, fn)`` pairs), or an
  item that is not callable: Python's "'int' object is not callable";
* ``tn.device``, ``tn.name_scope`` and ``tn.colocate_with`` of the wrong kind: Python's
  ``TypeError``, or an error on the partitioned backends alone;
* a ``cond``, ``body``, branch or ``fn`` that cannot take the arguments it is called with: Python's
  ``TypeError`` from the builder's call;
* ``map_fn`` whose ``fn`` returns another structure of as many tensors as ``dtype`` describes: packed
  as ``dtype``'s, silently;
* ``elems`` whose leading dimensions differ at run time: a longer second leaf lost its last elements
  silently.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from case_table import Case, Cases, f64
from route_table import ROUTES, case_routes, run_on

import turnout as tn
from turnout.session import RunOptions

pytest.importorskip("jax")

CASES = Cases()
case = CASES.case



Pair = collections.namedtuple("Pair", ["a", "b"])


@case
def namedtuple_and_nested_dict_loop_variables() -> Case:
    def body(i: tn.Tensor, p: Pair, d: dict[str, Any]) -> tuple[Any, ...]:
        return i + 1, Pair(p.a * 2.0, p.b + p.a), {"s": (d["s"][0] + 1.0, [d["s"][1][0] - p.a])}

    i, p, d = tn.while_loop(lambda i, p, d: i < 3, body,
                            (tn.constant(0), Pair(f64(1.0), f64(0.0)), {"s": (f64(0.0), [f64(10.0)])}))
    assert isinstance(p, Pair)
    # a: 1, 2, 4, 8; b sums a before each step: 1 + 2 + 4; s[1][0] = 10 - 7
    return [i, p.a, p.b, d["s"][0], d["s"][1][0]], {}, [3, 8.0, 7.0, 3.0, 3.0]


@case
def tensorflow_fold_values() -> Case:
    xs = tn.constant([1, 2, 3, 4, 5, 6])

    def step(a: tn.Tensor, x: tn.Tensor) -> tn.Tensor:
        return (a + x) * 2

    ten = tn.constant(10)
    return ([tn.foldl(step, xs), tn.foldl(step, xs, initializer=ten), tn.foldr(step, xs),
             tn.foldr(step, xs, initializer=ten)], {}, [208, 880, 450, 1282])


@case
def reversed_scan_without_initializer_and_scan_of_pairs() -> Case:
    xs = tn.constant([1.0, 2.0, 3.0, 4.0])
    a, b = tn.scan(lambda c, e: (c[0] + e[0], c[1] * e[1]), (xs, xs * 2.0))
    return [tn.scan(lambda c, x: c + x, xs, reverse=True), a, b], {}, [[10.0, 9.0, 7.0, 4.0], [1.0, 3.0, 6.0, 10.0],
                                                                      [2.0, 8.0, 48.0, 384.0]]


@case
def map_fn_changing_dtype_over_two_inputs() -> Case:
    xs, ys = tn.constant([1, 2, 3]), tn.constant([10, 20, 30])
    a, b = tn.map_fn(lambda e: (e[0] * e[1], tn.cast(e[0], tn.float64) / 2.0), (xs, ys), dtype=(tn.int32, tn.float64))
    return [a, b], {}, [[10, 40, 90], [0.5, 1.0, 1.5]]


@case
def tensor_array_read_twice_and_grown_past_its_size() -> Case:
    x = tn.placeholder(tn.float64, [], name="x")
    ta = tn.TensorArray(tn.float64, size=1, dynamic_size=True).write(0, x).write(3, x * x)
    r = ta.read(0) * ta.read(0) + ta.read(3)
    (d,) = tn.gradients(r, [x])
    return [r, d, ta.size()], {x: 3.0}, [18.0, 12.0, 4]


@case
def case_out_of_range_takes_the_default() -> Case:
    i = tn.placeholder(tn.int32, [], name="i")
    fns = [lambda: tn.constant(10), lambda: tn.constant(20), lambda: tn.constant(30)]
    return [tn.case(i, fns[:2], default=lambda: tn.constant(-1)), tn.case(i, fns)], {i: -3}, [-1, 30]


@case
def loop_gradient_through_stop_gradient_and_past_a_constant_loop() -> Case:
    x = tn.placeholder(tn.float64, [], name="x")
    y = tn.placeholder(tn.float64, [], name="y")
    _, _, b = tn.while_loop(lambda i, a, b: i < 3, lambda i, a, b: (i + 1, a * y, tn.stop_gradient(b) + a),
                            [tn.constant(0), x, f64(0.0)])
    c = tn.while_loop(lambda i, v: i < 2, lambda i, v: (i + 1, v * x), [tn.constant(0), x], back_prop=False)[1]
    dx, dy = tn.gradients(b + c, [x, y])
    # b = x + x y + x y^2, but only its last term carries a gradient; c = x^3 carries none
    return [b, c, dx, dy], {x: 2.0, y: 3.0}, [26.0, 8.0, 9.0, 12.0]


def _run(g: tn.Graph, route: str, fetches: Any, feeds: Any = None) -> Any:
    return run_on(route, g, fetches, feeds)


@pytest.mark.parametrize("name,route", case_routes(CASES))
def test_a_tensorflow_suite_case_on_every_route(name: str, route: str) -> None:
    g = tn.Graph()
    with g.as_default():
        fetches, feeds, want = CASES[name]()
    got = _run(g, route, fetches, feeds)
    assert want is not None and len(got) == len(want)
    for k, (a, b) in enumerate(zip(got, want, strict=True)):
        np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=1e-9,
                                   err_msg=f"{name} on {route}: fetch {k}")


# ---- the bugs ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("route", sorted(ROUTES))
def test_scan_of_a_fed_scalar_is_a_kernel_error_on_every_route(route: str) -> None:
    """The fast backend stood zeros in for the refused ``TensorArrayUnstack`` of a scalar, and the read
    of slot 0 (a scan without initializer) met an array where a TensorArray was due: Python's
    ``AttributeError`` while tracing. It now stands in an empty TensorArray, and the unstack's own
    error is the one raised, as on the interpreters."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, None, name="x")
        ys = tn.scan(lambda a, e: a + e, x)
    with pytest.raises(tn.KernelError, match="cannot unstack a scalar"):
        _run(g, route, ys, {x: np.float32(1.0)})
    np.testing.assert_allclose(_run(g, route, ys, {x: np.array([1.0, 2.0], np.float32)}), [1.0, 3.0])


def test_tensor_arrays_of_two_dtypes_never_meet_in_a_merge() -> None:
    """A TensorArray's dtype is ``tensor_array`` whatever it holds, so a cond whose branches return
    float32 and int32 arrays (or a loop body returning another dtype's array) was accepted, its
    result typed as one branch's array while it held the other's values on every backend."""
    with tn.Graph().as_default():
        p = tn.placeholder(tn.bool, [], name="p")
        with pytest.raises(tn.DTypeError, match="output 0 is a TensorArray of float32 in true_fn but of int32"):
            tn.cond(p, lambda: tn.TensorArray(tn.float32, size=1).write(0, 1.5),
                    lambda: tn.TensorArray(tn.int32, size=1).write(0, 2))
        with pytest.raises(tn.DTypeError, match="loop variable 1 enters as a TensorArray of float32 but the body "
                                                "returns one of int32"):
            tn.while_loop(lambda i, t: i < 2, lambda i, t: (i + 1, tn.TensorArray(tn.int32, size=2).write(0, 1)),
                          [tn.constant(0), tn.TensorArray(tn.float32, size=2)])
        with pytest.raises(tn.ShapeError, match=r"TensorArray of elements \[2\] on entry but of \[3\]"):
            tn.while_loop(lambda i, t: i < 1,
                          lambda i, t: (i + 1, tn.TensorArray(tn.float32, size=2).write(0, [1.0, 2.0, 3.0])),
                          [tn.constant(0), tn.TensorArray(tn.float32, size=2, element_shape=[2])])
        # branches of two element shapes: the merged array's element shape is what both share
        ta = tn.cond(p, lambda: tn.TensorArray(tn.float32, size=1).write(0, [1.0, 2.0, 3.0]),
                     lambda: tn.TensorArray(tn.float32, size=1).write(0, [1.0, 2.0]))
        assert ta.read(0).shape == (None,)


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_case_takes_tensorflows_forms_of_branch_fns(route: str) -> None:
    """``tf.switch_case`` takes a dict of index -> fn and a list of ``(index, fn)`` pairs as well as a
    list of fns; a dict used to give its keys as the branches ("'int' object is not callable")."""
    g = tn.Graph()
    with g.as_default():
        i = tn.placeholder(tn.int32, [], name="i")
        by_dict = tn.case(i, {1: lambda: tn.constant(20), 0: lambda: tn.constant(10), 2: lambda: tn.constant(30)})
        by_pairs = tn.case(i, [(0, lambda: tn.constant(1)), (1, lambda: tn.constant(2))],
                           default=lambda: tn.constant(-1))
    assert [int(v) for v in _run(g, route, [by_dict, by_pairs], {i: 1})] == [20, 2]
    assert [int(v) for v in _run(g, route, [by_dict, by_pairs], {i: 5})] == [30, -1]


@pytest.mark.parametrize("branch_fns,words", [
    ([lambda: tn.constant(1), 3], r"branch_fns\[1\] must be a callable"),
    ({0: lambda: tn.constant(1), 2: lambda: tn.constant(2)}, r"indices must be 0 to 1, each once; got \[0, 2\]"),
    ([(0, lambda: tn.constant(1)), (0, lambda: tn.constant(2))], r"each once; got \[0, 0\]"),
    ([("a", lambda: tn.constant(1))], "the index of branch_fns"),
    ([(0, 3)], "for index 0 is not callable"),
    ([(0, lambda: tn.constant(1)), lambda: tn.constant(2)], r"branch_fns\[1\] must be an \(index, callable\) pair"),
    ({}, "at least one branch function"),
], ids=["not callable", "gap", "twice", "str index", "pair not callable", "mixed", "empty dict"])
def test_bad_branch_fns_of_case_are_graph_build_errors(branch_fns: Any, words: str) -> None:
    with tn.Graph().as_default(), pytest.raises(tn.GraphBuildError, match=words):
        tn.case(tn.constant(0), branch_fns)


def test_device_name_scope_and_colocate_with_take_only_their_kinds() -> None:
    """``tn.device(3)`` was ignored by the unpartitioned backends and a ``PlacementError`` on the
    partitioned ones; ``tn.name_scope(3)`` raised Python's ``TypeError`` from ``str.join``."""
    with tn.Graph().as_default():
        for scope, words in [(lambda: tn.device(3), "device: the name must be a string"),
                             (lambda: tn.name_scope(3), "name_scope: the name must be a string"),
                             (lambda: tn.colocate_with("x"), "colocate_with: expected a tensor")]:
            with pytest.raises(tn.ArgumentError, match=words), scope():
                pass
        with tn.device("cpu:0"), tn.name_scope("outer"), tn.colocate_with(None), tn.device(None):
            assert tn.constant(1.0).name.startswith("outer/")


ARITY: list[tuple[str, Callable[[], Any], str]] = [
    ("while cond", lambda: tn.while_loop(lambda: True, lambda i: i + 1, [tn.constant(0)]),
     r'while_loop "while": cond is called with 1 positional argument'),
    ("while body", lambda: tn.while_loop(lambda i: i < 2, lambda i, j: i + 1, [tn.constant(0)]),
     r'while_loop "while": body is called with 1 positional argument'),
    ("while body of a dict", lambda: tn.while_loop(lambda d: d["i"] < 2, lambda: 1, [{"i": tn.constant(0)}]),
     r"body is called with 1 positional argument"),
    ("cond branch", lambda: tn.cond(tn.constant(True), lambda x: x, lambda: tn.constant(1)),
     r'cond "cond": true_fn is called with 0 positional arguments'),
    ("case default", lambda: tn.case(tn.constant(0), [lambda: tn.constant(1)], default=lambda x: x),
     r'case "case": default is called with 0'),
    ("scan fn", lambda: tn.scan(lambda c: c, tn.constant([1.0])), r"scan: fn is called with 2 positional arguments"),
    ("foldr fn", lambda: tn.foldr(lambda c, x, y: c, tn.constant([1.0])), r"foldr: fn is called with 2"),
    ("map_fn fn", lambda: tn.map_fn(lambda a, b: a, tn.constant([1.0])), r"map_fn: fn is called with 1"),
]


@pytest.mark.parametrize("what,build,words", ARITY, ids=[a[0] for a in ARITY])
def test_a_function_that_cannot_take_its_arguments_is_an_argument_error(what: str, build: Callable[[], Any],
                                                                       words: str) -> None:
    """A mismatch between a builder's structure and its function's parameters was Python's
    ``TypeError`` from the builder's call; the builder now reads the function's signature first. A
    ``TypeError`` raised inside the function is the user's own and passes unchanged."""
    with tn.Graph().as_default(), pytest.raises(tn.ArgumentError, match=words):
        build()


def test_an_error_raised_inside_the_users_function_passes_unchanged() -> None:
    def body(i: tn.Tensor) -> tn.Tensor:
        raise TypeError("the user's own")

    with tn.Graph().as_default(), pytest.raises(TypeError, match="the user's own"):
        tn.while_loop(lambda i: i < 2, body, [tn.constant(0)])


def test_map_fn_output_must_have_the_structure_dtype_describes() -> None:
    """A dict of one tensor for ``dtype=(tn.float32,)`` was packed as the tuple, silently (as many
    tensors, another structure); TensorFlow's ``map_fn`` refuses it too."""
    with tn.Graph().as_default():
        xs = tn.constant([1.0, 2.0])
        with pytest.raises(tn.GraphBuildError, match="map_fn: fn's output and dtype: structures differ"):
            tn.map_fn(lambda x: {"a": x}, xs, dtype=(tn.float32,))
        with pytest.raises(tn.GraphBuildError, match="map_fn: fn's output and elems"):
            tn.map_fn(lambda e: {"a": e[0], "b": e[1]}, (xs, xs))
        # lists and tuples stand for each other, as everywhere in Turnout
        a, b = tn.map_fn(lambda e: [e[0], e[1] * 2.0], (xs, xs))
        assert a.shape == b.shape == (2,)


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_elems_of_two_run_time_lengths_are_a_kernel_error_on_every_route(route: str) -> None:
    """The loop of ``map_fn``, ``scan`` and the folds runs as many steps as the first leaf of
    ``elems`` has elements; a second leaf one element longer (lengths known only at run time) lost
    its last element silently. A leaf whose length is not known equal while building is checked
    when it runs."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [None], name="x")
        y = tn.placeholder(tn.float32, [None], name="y")
        fetches = [tn.map_fn(lambda e: e[0] * e[1], (x, y), dtype=tn.float32),
                   tn.scan(lambda c, e: c + e[0] * e[1], (x, y), initializer=tn.constant(0.0)),
                   tn.foldr(lambda c, e: c + e[0] * e[1], (x, y), initializer=tn.constant(0.0))]
    for f in fetches:
        with pytest.raises(tn.KernelError, match=r"elems must share their leading dimension.*\[2\] \[3\]"):
            _run(g, route, f, {x: np.ones(2, np.float32), y: np.ones(3, np.float32)})
    got = _run(g, route, fetches, {x: np.array([1.0, 2.0], np.float32), y: np.array([3.0, 4.0], np.float32)})
    np.testing.assert_allclose(got[0], [3.0, 8.0])
    np.testing.assert_allclose(got[1], [3.0, 11.0])
    assert float(got[2]) == 11.0


def test_session_placement_options_and_run_options_of_the_wrong_kind_are_argument_errors() -> None:
    """``devices=3`` and ``requests=3`` reached the partitioned backends' ``list``/``dict`` (Python's
    ``TypeError``); ``RunOptions(foo=1)`` the dataclass's ``TypeError``."""
    g = tn.Graph()
    with g.as_default():
        tn.constant(1.0)
    for backend in ("reference", "fast"):
        with pytest.raises(tn.ArgumentError, match="Session: devices must be a list of device names"):
            tn.Session(g, backend=backend, devices=3)
        with pytest.raises(tn.ArgumentError, match="Session: requests must be a dict"):
            tn.Session(g, backend=backend, devices=["cpu:0"], requests=3)
    with pytest.raises(tn.ArgumentError, match=r"unknown run option\(s\) \['foo'\]"):
        RunOptions(foo=1)
    assert RunOptions(max_iterations=5).max_iterations == 5


@pytest.mark.parametrize("route", ["reference", "fast"])
def test_grad_ys_are_taken_apart_only_as_deep_as_ys(route: str) -> None:
    """``grad_ys=[[1.0, 2.0]]`` for ``ys=[y]`` of shape [2] is one weight, given as a Python list, as
    TensorFlow takes it; flattened whole it was two ("2 grad_ys for 1 ys")."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float64, [2], name="x")
        y, s = x * x, tn.reduce_sum(x)
        (a,) = tn.gradients([y], [x], grad_ys=[[1.0, 2.0]])
        (b,) = tn.gradients({"a": y, "b": [s]}, [x], grad_ys={"a": [1.0, 0.0], "b": [2.0]})
        (c,) = tn.gradients([y, s], [x], grad_ys=[None, 3.0])
        with pytest.raises(tn.GradientError, match=r"grad_ys for Mul:0 has shape \[1\], expected \[2\]"):
            tn.gradients([y, s], [x], grad_ys=[[1.0], [2.0]])
        with pytest.raises(tn.GradientError, match="2 grad_ys for 1 ys"):
            tn.gradients(y, [x], grad_ys=[1.0, 2.0])
    got = _run(g, route, [a, b, c], {x: np.array([3.0, 4.0])})
    np.testing.assert_allclose(got, [[6.0, 16.0], [8.0, 2.0], [9.0, 11.0]])
