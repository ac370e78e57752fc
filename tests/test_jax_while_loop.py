"""``turnout.jax.while_loop``: reverse-mode gradients of a JAX loop of unknown length in a fixed budget.

Every gradient is compared with JAX's own: ``jax.grad`` through ``lax.scan`` of the same body at the same
(computed) trip count, and a store-everything reference (a ``lax.scan`` over more steps than the loop
takes, masked after the loop would stop) whose trip count is a traced value, so one compilation serves
every trip count. The body calls of a gradient are counted on the host and must equal what
``turnout.checkpoint_schedule.cost`` reports.
"""

from __future__ import annotations

import subprocess
import sys
from functools import lru_cache
from typing import Any

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from jax import lax  # noqa: E402

import turnout as tn  # noqa: E402
import turnout.jax as tnj  # noqa: E402
from turnout import checkpoint_schedule as cs  # noqa: E402


@pytest.fixture(autouse=True)
def _jax_defaults() -> Any:
    """Every test runs under JAX's default configuration (32-bit types), whatever another test module
    set globally: a JAX user's loop state keeps the dtypes JAX gives it, and these tests state byte
    counts and dtypes as a user sees them by default."""
    with jax.enable_x64(False):
        yield


MAX_N = 1024  # the store-everything reference's length (at least every trip count tested)
X0 = jnp.array([0.3, -1.2, 0.7], jnp.float32)
W = jnp.array([[0.9, -0.4, 0.1], [0.3, 0.8, -0.5], [-0.2, 0.6, 0.7]], jnp.float32)


def step(x: jax.Array, w: jax.Array) -> jax.Array:
    """A small nonlinear step whose gradient stays finite over a thousand steps."""
    return jnp.tanh(w @ x) * 0.9 + 0.1 * x


def _loss(x: jax.Array) -> jax.Array:
    return jnp.sum(x * jnp.arange(1.0, 4.0))


@lru_cache(None)
def counted_grad(slots: int) -> Any:
    """jit(grad) of the loss after ``n`` steps (``n`` traced) through ``tnj.while_loop`` with ``slots``;
    ``w`` is closed over by the body."""

    def f(x0: jax.Array, w: jax.Array, n: jax.Array) -> jax.Array:
        x, _ = tnj.while_loop(lambda c: c[1] < n, lambda c: (step(c[0], w), c[1] + 1), (x0, jnp.int32(0)),
                              checkpoints=slots)
        return _loss(x)

    return jax.jit(jax.grad(f, argnums=(0, 1)))


@jax.jit
def store_everything_grad(x0: jax.Array, w: jax.Array, n: jax.Array) -> Any:
    """The reference: ``lax.scan`` over MAX_N steps that stop changing the state after ``n``."""

    def f(x0: jax.Array, w: jax.Array) -> jax.Array:
        def body(x: jax.Array, i: jax.Array) -> tuple[jax.Array, None]:
            return jnp.where(i < n, step(x, w), x), None

        return _loss(lax.scan(body, x0, jnp.arange(MAX_N))[0])

    return jax.grad(f, argnums=(0, 1))(x0, w)


def scan_grad(n: int) -> Any:
    """``jax.grad`` through ``lax.scan`` of the same body at a fixed trip count ``n``."""

    def f(x0: jax.Array, w: jax.Array) -> jax.Array:
        return _loss(lax.scan(lambda x, _: (step(x, w), None), x0, None, length=n)[0])

    return jax.jit(jax.grad(f, argnums=(0, 1)))(X0, W)


def assert_grads_close(got: Any, want: Any) -> None:
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-4, atol=1e-5)  # float32 over 1000 steps


# ---- gradients equal JAX's ------------------------------------------------------------------------------

SLOTS = [1, 2, 3, 8, 64]
TRIP_COUNTS = [0, 1, 2, 3, 7, 13, 97, 1000]


@pytest.mark.parametrize("slots", SLOTS)
def test_gradient_equals_store_everything_at_every_trip_count(slots: int) -> None:
    grad = counted_grad(slots)
    for n in TRIP_COUNTS:
        assert_grads_close(grad(X0, W, jnp.int32(n)), store_everything_grad(X0, W, jnp.int32(n)))


@pytest.mark.parametrize("n", [0, 1, 2, 13, 1000])
def test_gradient_equals_scan_at_the_same_trip_count(n: int) -> None:
    assert_grads_close(counted_grad(3)(X0, W, jnp.int32(n)), scan_grad(n))


def test_the_smallest_budget_holds_one_state() -> None:
    per_state = X0.nbytes + 4 + tnj.POSITION_BYTES  # the float vector, the int32 counter, the position
    state = (X0, jnp.int32(0))
    assert tnj.state_bytes(state) + tnj.POSITION_BYTES == per_state
    assert tnj.checkpoint_slots(state, memory_budget=per_state) == 1
    assert tnj.checkpoint_slots(state, memory_budget=10 * per_state + per_state - 1) == 10

    def f(x0: jax.Array) -> jax.Array:
        x, _ = tnj.while_loop(lambda c: c[1] < 37, lambda c: (step(c[0], W), c[1] + 1), (x0, jnp.int32(0)),
                              memory_budget=per_state)
        return _loss(x)

    assert_grads_close(jax.grad(f)(X0), scan_grad(37)[0])


def test_without_a_gradient_it_is_lax_while_loop() -> None:
    def cond(c: Any) -> jax.Array:
        return c[1] < 25

    def body(c: Any) -> Any:
        return step(c[0], W), c[1] + 1

    got = jax.jit(lambda x: tnj.while_loop(cond, body, (x, 0), checkpoints=2))(X0)
    want = lax.while_loop(cond, body, (X0, 0))
    assert_grads_close(got[0], want[0])
    assert int(got[1]) == 25


# ---- data-dependent trip counts, closed forms -------------------------------------------------------------


def test_squaring_until_100_has_gradient_1024() -> None:
    # TensorFlow's closed form: 2 -> 4 -> 16 -> 256 is x**8, whose derivative at 2 is 8 * 2**7
    def f(x: jax.Array) -> jax.Array:
        return tnj.while_loop(lambda v: v < 100.0, lambda v: v * v, x, checkpoints=1)

    assert float(jax.grad(f)(jnp.float32(2.0))) == 1024.0
    assert float(jax.jit(jax.grad(f))(jnp.float32(2.0))) == 1024.0


@pytest.mark.parametrize("slots", [1, 4, 32])
def test_loop_until_a_value_exceeds_a_threshold(slots: int) -> None:
    def body(c: Any) -> Any:
        x, a = c
        return x * 1.05 + a * jnp.sin(x), a

    def f(x0: jax.Array, a: jax.Array, threshold: jax.Array) -> jax.Array:
        x, _ = tnj.while_loop(lambda c: jnp.sum(c[0]) < threshold, body, (x0, a), checkpoints=slots)
        return jnp.sum(x**2)

    def reference(x0: jax.Array, a: jax.Array, threshold: jax.Array) -> jax.Array:
        def masked(c: Any, _: None) -> tuple[Any, None]:
            go = jnp.sum(c[0]) < threshold
            return jax.tree.map(lambda new, old: jnp.where(go, new, old), body(c), c), None

        x, _ = lax.scan(masked, (x0, a), None, length=2000)[0]
        return jnp.sum(x**2)

    x0, a = jnp.array([0.5, 0.25]), jnp.float32(0.1)
    trips = int(lax.while_loop(lambda c: jnp.sum(c[0][0]) < 1000.0, lambda c: (body(c[0]), c[1] + 1), ((x0, a), 0))[1])
    assert 100 < trips < 2000
    got = jax.jit(jax.grad(f, argnums=(0, 1, 2)))(x0, a, jnp.float32(1000.0))
    want = jax.jit(jax.grad(reference, argnums=(0, 1, 2)))(x0, a, jnp.float32(1000.0))
    assert_grads_close(got, want)
    # and lax.scan at the trip count the loop computed
    at_trips = jax.grad(lambda x0, a: jnp.sum(lax.scan(lambda c, _: (body(c), None), (x0, a), None,
                                                       length=trips)[0][0] ** 2), argnums=(0, 1))(x0, a)
    assert_grads_close(got[:2], at_trips)
    assert float(got[2]) == 0.0  # the threshold only steers: no cotangent flows through a predicate


# ---- pytrees, integer leaves, closed-over values ----------------------------------------------------------


def test_nested_pytree_state_with_integer_and_bool_leaves() -> None:
    def body(s: dict[str, Any]) -> dict[str, Any]:
        h, (c, scale) = s["h"], s["pair"]
        return {"h": jnp.tanh(h * scale + c), "pair": (c * 0.9 + 0.01 * h.sum(), scale), "i": s["i"] + 1,
                "flag": jnp.logical_not(s["flag"]), "hist": [s["hist"][0] + h[:2]]}

    s0 = {"h": jnp.array([0.1, 0.2, 0.3]), "pair": (jnp.float32(0.5), jnp.float32(1.3)), "i": jnp.int32(0),
          "flag": jnp.array(True), "hist": [jnp.zeros(2)]}

    def run(loop: Any) -> Any:
        out, pull = jax.vjp(loop, s0)
        return out, pull(jax.tree.map(lambda a: jnp.ones_like(a) if jnp.issubdtype(a.dtype, jnp.inexact)
                                      else np.zeros(a.shape, jax.dtypes.float0), out))[0]

    got_out, got = run(lambda s: tnj.while_loop(lambda s: s["i"] < 9, body, s, checkpoints=2))
    want_out, want = run(lambda s: lax.scan(lambda s, _: (body(s), None), s, None, length=9)[0])
    assert_grads_close(got_out, want_out)
    assert got["i"].dtype == jax.dtypes.float0 and got["flag"].dtype == jax.dtypes.float0
    assert_grads_close({k: v for k, v in got.items() if k not in ("i", "flag")},
                       {k: v for k, v in want.items() if k not in ("i", "flag")})


def test_closed_over_arrays_get_their_cotangents() -> None:
    # both the body's weights and an offset reached through two closures
    def f(w: jax.Array, b: jax.Array) -> jax.Array:
        def inner(x: jax.Array) -> jax.Array:
            return step(x, w) + b

        x, _ = tnj.while_loop(lambda c: c[1] < 50, lambda c: (inner(c[0]), c[1] + 1), (X0, 0), checkpoints=4)
        return _loss(x)

    def g(w: jax.Array, b: jax.Array) -> jax.Array:
        return _loss(lax.scan(lambda x, _: (step(x, w) + b, None), X0, None, length=50)[0])

    b = jnp.array([0.01, -0.02, 0.03])
    assert_grads_close(jax.grad(f, argnums=(0, 1))(W, b), jax.grad(g, argnums=(0, 1))(W, b))
    assert_grads_close(jax.jit(jax.grad(f, argnums=(0, 1)))(W, b), jax.grad(g, argnums=(0, 1))(W, b))


def test_vmap_of_the_gradient_with_a_trip_count_per_element() -> None:
    def f(x0: jax.Array, n: jax.Array) -> jax.Array:
        x, _ = tnj.while_loop(lambda c: c[1] < n, lambda c: (jnp.sin(c[0]) * 1.1, c[1] + 1), (x0, 0),
                              checkpoints=3)
        return x

    def masked(x0: jax.Array, n: jax.Array) -> jax.Array:
        return lax.scan(lambda c, i: (jnp.where(i < n, jnp.sin(c) * 1.1, c), None), x0, jnp.arange(64))[0]

    xs, ns = jnp.array([0.1, 0.5, 1.0, 2.0]), jnp.array([0, 3, 17, 40])
    assert_grads_close(jax.vmap(jax.grad(f))(xs, ns), jax.vmap(jax.grad(masked))(xs, ns))


def test_a_loop_in_anothers_body_reads_the_outer_counter() -> None:
    """An inner loop whose predicate reads the outer loop's integer counter: the counter is a traced
    value of the outer body, which the inner loop's functions take as an argument (not baked in), so
    the backward loops, which run the bodies again in traces of their own, find no escaped tracer."""
    def f(x: jax.Array) -> jax.Array:
        def body(s: Any) -> Any:
            i, v = s
            _, w = tnj.while_loop(lambda t: t[0] < i + 1, lambda t: (t[0] + 1, jnp.sin(t[1]) * 1.1), (0, v),
                                  checkpoints=2)
            return i + 1, w
        return tnj.while_loop(lambda s: s[0] < 4, body, (0, x), checkpoints=3)[1]

    def unrolled(x: jax.Array) -> jax.Array:
        for i in range(4):
            for _ in range(i + 1):
                x = jnp.sin(x) * 1.1
        return x

    x = jnp.float32(0.7)
    np.testing.assert_allclose(f(x), unrolled(x), rtol=1e-6)
    np.testing.assert_allclose(jax.grad(f)(x), jax.grad(unrolled)(x), rtol=1e-5)
    np.testing.assert_allclose(jax.jit(jax.grad(f))(x), jax.grad(unrolled)(x), rtol=1e-5)


def test_a_loop_in_a_scan_step() -> None:
    def f(x: jax.Array) -> jax.Array:
        def st(c: jax.Array, _: None) -> tuple[jax.Array, None]:
            return tnj.while_loop(lambda s: s[0] < 2, lambda s: (s[0] + 1, jnp.cos(s[1])), (0, c))[1], None
        return lax.scan(st, x, None, length=3)[0]

    def unrolled(x: jax.Array) -> jax.Array:
        for _ in range(6):
            x = jnp.cos(x)
        return x

    np.testing.assert_allclose(jax.grad(f)(jnp.float32(0.5)), jax.grad(unrolled)(jnp.float32(0.5)), rtol=1e-5)


@pytest.mark.parametrize("t", [5.0, jnp.float32(5.0), 5], ids=["python float", "array", "python int"])
def test_a_value_only_the_predicate_reads_gets_a_zero_cotangent(t: Any) -> None:
    """The trip count is a step function of a threshold the predicate closes over: its derivative is
    zero almost everywhere, as ``jax.grad`` of the unrolled loop says, whatever kind of number it is."""
    def f(x: jax.Array, t: Any) -> jax.Array:
        return tnj.while_loop(lambda v: v < t, lambda v: v * 1.5 + 0.1, x, checkpoints=2)

    x = jnp.float32(0.3)
    np.testing.assert_allclose(jax.grad(f)(x, t), 1.5 ** 6, rtol=1e-6)
    if not isinstance(t, int):
        assert float(jax.grad(f, argnums=1)(x, t)) == 0.0


# ---- the recompute cost is the schedule's --------------------------------------------------------------------


@pytest.mark.parametrize(("n", "slots"), [(0, 3), (1, 1), (10, 10), (40, 1), (97, 2), (97, 5), (300, 16)])
def test_body_calls_equal_what_the_schedule_reports(n: int, slots: int) -> None:
    calls = []

    def body(c: Any) -> Any:
        jax.debug.callback(lambda: calls.append(1))
        return step(c[0], W), c[1] + 1

    def f(x0: jax.Array) -> jax.Array:
        return _loss(tnj.while_loop(lambda c: c[1] < n, body, (x0, 0), checkpoints=slots)[0])

    jax.block_until_ready(jax.grad(f)(X0))
    jax.effects_barrier()
    assert len(calls) == cs.cost(n, slots).body_calls


@pytest.mark.parametrize("budget_kib", [64, 1024])
def test_the_compiled_gradient_holds_the_budget_once(budget_kib: int) -> None:
    # XLA's own accounting of the gradient's temporaries: the checkpoint buffers once (thinning moves
    # states in place; a gather held a second buffer), plus a few working states, at any trip count
    x0 = jnp.ones(256)  # 1 KiB states: the budget dwarfs the working values

    def f(x0: jax.Array, w: jax.Array, n: jax.Array) -> jax.Array:
        x, _ = tnj.while_loop(lambda c: c[1] < n, lambda c: (jnp.tanh(c[0] * w), c[1] + 1), (x0, jnp.int32(0)),
                              memory_budget=budget_kib * 1024)
        return jnp.sum(x)

    analysis = jax.jit(jax.grad(f, argnums=(0, 1))).lower(x0, jnp.float32(0.5), jnp.int32(5)).compile()
    memory = analysis.memory_analysis()
    if memory is None:
        pytest.skip("this platform does not report memory")
    assert memory.temp_size_in_bytes <= budget_kib * 1024 + 16 * 1024


# ---- property: random trip counts and budgets -------------------------------------------------------------

#: few examples in the default (ci) profile, where each one runs a compiled gradient; all under dev/nightly
EXAMPLES = 25 if settings.default.max_examples <= 100 else settings.default.max_examples


@settings(max_examples=EXAMPLES)
@given(n=st.integers(0, 600), slots=st.sampled_from([1, 2, 3, 5, 8, 64]))
def test_gradient_equals_store_everything_for_random_trip_counts_and_budgets(n: int, slots: int) -> None:
    assert_grads_close(counted_grad(slots)(X0, W, jnp.int32(n)), store_everything_grad(X0, W, jnp.int32(n)))


# ---- user mistakes are Turnout errors ----------------------------------------------------------------------


def _loop(init: Any = (X0, 0), body: Any = None, cond: Any = None, **kw: Any) -> Any:
    return tnj.while_loop(cond or (lambda c: c[1] < 3), body or (lambda c: (c[0] * 2.0, c[1] + 1)), init, **kw)


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"memory_budget": 19}, "holds no loop state: one takes 20 bytes"),
    ({"memory_budget": -1}, "memory_budget must be a number of bytes"),
    ({"memory_budget": 1.5e6}, "memory_budget must be a number of bytes"),
    ({"checkpoints": 0}, "checkpoints must be an int >= 1"),
    ({"checkpoints": True}, "checkpoints must be an int >= 1"),
    ({"checkpoints": 2, "memory_budget": 100}, "not both"),
    ({"checkpoints": 2**40}, "would be allocated whole"),
])
def test_bad_budgets_are_argument_errors(kwargs: dict[str, Any], words: str) -> None:
    with pytest.raises(tn.ArgumentError, match=words):
        _loop(**kwargs)


def test_bad_states_and_functions_are_argument_errors() -> None:
    with pytest.raises(tn.ArgumentError, match=r"init_val\[1\] is a str"):
        _loop(init=(X0, "three"))
    with pytest.raises(tn.ArgumentError, match="body_fun must return the structure it takes"):
        _loop(body=lambda c: c[0])
    with pytest.raises(tn.ArgumentError, match=r"changes the state\[0\] from float32\[3\] to float32\[2\]"):
        _loop(body=lambda c: (c[0][:2], c[1] + 1))
    with pytest.raises(tn.ArgumentError, match="changes the state"):
        _loop(body=lambda c: (c[0].astype(jnp.int32), c[1] + 1))
    with pytest.raises(tn.ArgumentError, match="cond_fun must return a scalar bool"):
        _loop(cond=lambda c: c[0] > 0)
    with pytest.raises(tn.ArgumentError, match=r"body_fun must be a function, got 3 \(int\)"):
        _loop(body=3)


def test_what_jax_cannot_trace_in_the_users_functions_is_an_argument_error_naming_it() -> None:
    # JAX's own tracing errors (a Python bool or int of a traced value) name the function and its line,
    # JAX's explanation chained; an error the user's function raises of its own passes as it is
    def python_if(c: Any) -> Any:
        return bool(c[1] < 3)

    with pytest.raises(tn.ArgumentError, match=rf"JAX cannot trace cond_fun \(.*test_jax_while_loop.py:"
                                               rf"{python_if.__code__.co_firstlineno}\).*boolean conversion") as info:
        _loop(cond=python_if)
    assert isinstance(info.value.__cause__, jax.errors.TracerBoolConversionError)
    with pytest.raises(tn.ArgumentError, match="JAX cannot trace body_fun"):
        _loop(body=lambda c: (c[0], c[1] + int(c[1])))
    with pytest.raises(ZeroDivisionError):
        _loop(body=lambda c: (c[0], c[1] + 1 // 0))


def test_import_turnout_does_not_import_jax() -> None:
    code = "import sys, turnout, turnout.checkpoint_schedule; assert 'jax' not in sys.modules, 'jax was imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_compiled_split_is_the_pure_one() -> None:
    # the backward loop's int32 arithmetic must pick the schedule's split, saturation included
    cases = [(length, slots) for length in [2, 3, 10, 97, 1000, 65_537, 2**29 - 1, 2**31 - 1]
             for slots in [2, 3, 4, 17, 64, 1000, 2**20]]
    lengths, slots = (jnp.array(c, jnp.int32) for c in zip(*cases, strict=True))
    got = jax.jit(jax.vmap(tnj._split))(lengths, slots)
    assert [int(m) for m in got] == [cs.split(length, s) for length, s in cases]


def test_second_derivatives_are_unsupported_errors() -> None:
    def f(x: jax.Array) -> jax.Array:
        return tnj.while_loop(lambda c: c[1] < 5, lambda c: (jnp.sin(c[0]), c[1] + 1), (x, 0), checkpoints=2)[0]

    for second in (jax.grad(jax.grad(f)), jax.jacfwd(jax.grad(f)), jax.grad(jax.jacfwd(f)),
                   jax.jit(jax.jacrev(jax.jacfwd(f)))):
        with pytest.raises(tn.UnsupportedError, match="second and higher derivatives"):
            second(0.5)


def _decay(w: jax.Array, x: jax.Array, n: Any) -> jax.Array:
    """A loop whose tangents come through its state (``x``) and through an array it closes over (``w``)."""
    return tnj.while_loop(lambda c: c[1] < n, lambda c: (jnp.tanh(c[0] * w), c[1] + 1), (x, 0), checkpoints=3)[0]


def _decay_scan(w: jax.Array, x: jax.Array, n: int) -> jax.Array:
    return lax.fori_loop(0, n, lambda _, v: jnp.tanh(v * w), x)


@pytest.mark.parametrize("n", [0, 1, 7, 40])
def test_forward_mode_is_the_loops_own(n: int) -> None:
    # jax.jvp and jax.jacfwd differentiate lax.while_loop forward (no state saved), where JAX would
    # refuse the custom_vjp of the reverse mode: the same tangents as a loop of a fixed trip count
    w, x = jnp.linspace(0.5, 1.5, 3), jnp.linspace(-1.0, 1.0, 3)
    tw, tx = jnp.array([0.3, -0.2, 1.0]), jnp.array([1.0, 0.5, -2.0])
    got = jax.jvp(lambda w, x: _decay(w, x, n), (w, x), (tw, tx))
    want = jax.jvp(lambda w, x: _decay_scan(w, x, n), (w, x), (tw, tx))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    jitted = jax.jit(lambda w, x, n: jax.jvp(lambda w, x: _decay(w, x, n), (w, x), (tw, tx)))(w, x, n)
    np.testing.assert_allclose(jitted, want, rtol=1e-6, atol=1e-7)
    forward = jax.jacfwd(_decay, argnums=(0, 1))(w, x, n)
    reverse = jax.jacrev(_decay, argnums=(0, 1))(w, x, n)
    np.testing.assert_allclose(forward, reverse, rtol=1e-5, atol=1e-6)
    batched = jax.vmap(lambda t: jax.jvp(lambda x: _decay(w, x, n), (x,), (t,))[1])(jnp.eye(3))
    np.testing.assert_allclose(batched, forward[1].T, rtol=1e-5, atol=1e-6)
