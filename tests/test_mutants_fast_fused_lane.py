"""Laws of the lane of a plan's fused attempt (``turnout.fast.fused_lane``) that the repeated training
steps of ``tests/test_fast_lane.py`` do not reach: when no lane is made (each thing a lane depends on,
missing alone), the kept stacks as the fused call takes them, and XLA's out-of-memory from a lane's
call. Each law kills mutants of the full set of ``fast/fused_lane.py`` (issue 40, part 3). The
backend and the route are stand-ins (``make_fused_lane`` reads only the attributes set here, and
stops before it makes anything), so the file takes milliseconds."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import jax
import numpy as np
import pytest
from graphs import rnn_training_step

import turnout as tn
from turnout.errors import ResourceExhaustedError
from turnout.fast import fused_lane
from turnout.fast.fused_lane import buffers_of, make_fused_lane, out_of_memory
from turnout.fast.guards import DEFAULT_BOUND
from turnout.fast.stacks import StackValue

X = (1, 0)  # the one feed's key


@dataclass(frozen=True, eq=False)
class _Tensor:
    """A stand-in tensor: hashed by identity, as ``tn.Tensor`` is."""

    node: Any
    index: int = 0


def _parts() -> tuple[Any, Any, dict[str, Any]]:
    """A stand-in backend and fused route whose stage takes one feed ``X``, one Variable ``v`` and one
    kept stack ``s`` and returns it: everything a lane needs is there. Also the ``signature`` the
    backend gives the run's feeds (``"sig"``: the feed ``X`` as given)."""
    args = SimpleNamespace(feeds=[X], state=["var:v"], stacks=["s"])
    spec = SimpleNamespace(args=args, returns=lambda k: k == "s")
    plan = SimpleNamespace(fused=SimpleNamespace(fns={"seg": "jitted"}, spec=spec), kept=["s"])
    h = SimpleNamespace(plan=plan, var_keys=[("v", "var:v")], var_names=("v",))
    backend = SimpleNamespace(_stack_bufs={id(plan): {"s": "buffer"}}, _dev_vars={"v": ("entry", "copy")})
    sig = {"sig": [(SimpleNamespace(node=SimpleNamespace(id=X[0]), index=X[1]), None, None, None)]}
    return backend, h, sig


def _lane(monkeypatch: pytest.MonkeyPatch, backend: Any, h: Any, sig: Any) -> Any:
    """``make_fused_lane`` of the stand-ins, with ``signature`` giving ``sig["sig"]`` (checking that it
    is asked of the backend, the feeds and the given values), and the making of a lane past the
    checks stopped at its call: ``("wide", fn)`` for ``in_wide_mode(fn)``, ``("aot", fn, args,
    backend)`` for ``ahead_of_time`` (``args``: what the layout's ``flat`` was given)."""
    x = _Tensor(SimpleNamespace(id=X[0]), X[1])
    feeds, given = {x: 1.0}, {x: 1.0}
    if h.plan.fused is not None and h.plan.fused.spec is not None:
        h.plan.fused.spec.args.flat = lambda *a: a

    def signature(b: Any, f: Any, g: Any) -> Any:
        assert (b, f, g) == (backend, feeds, given)
        return sig["sig"]

    class Made(Exception):
        pass

    def made(*a: Any) -> Any:
        raise Made(a)

    monkeypatch.setattr(fused_lane, "signature", signature)
    monkeypatch.setattr(fused_lane, "in_wide_mode", lambda fn: made("wide", fn))
    monkeypatch.setattr(fused_lane, "ahead_of_time", lambda fn, args, b: made("aot", fn, args, b))
    try:
        return make_fused_lane(backend, h, [], feeds, given)
    except Made as e:
        return e.args[0]


def test_a_lane_is_made_where_the_run_is_laid_out_as_the_stage(monkeypatch: pytest.MonkeyPatch) -> None:
    """With every feed in the run's signature, every Variable the stage reads among the route's, every
    stack it takes kept, every kept stack returned and every Variable's device copy made, the lane
    goes on to be made: calling the stage's function in 64-bit mode for a wide route or a deeply
    nested program, else the executable of its last compilation for the run's flat arguments (the
    feeds by key, each Variable's device copy, the kept buffers, the default bound). Kills the
    mutants that invert a test of the checks or pass the executable other arguments."""
    backend, h, sig = _parts()
    for wide, deep in [(True, False), (False, True), (True, True)]:
        h.wide, backend._deep_nesting = wide, deep
        assert _lane(monkeypatch, backend, h, sig) == ("wide", "jitted")
    h.wide, backend._deep_nesting = False, False
    assert _lane(monkeypatch, backend, h, sig) == ("aot", "jitted", ({X: 1.0}, {"var:v": "copy"}, {"s": "buffer"},
                                                                     DEFAULT_BOUND), backend)


@pytest.mark.parametrize("missing", ["signature", "stage", "seg", "stacks", "spec", "feed", "variable", "stack",
                                     "returned", "device copy"])
def test_no_lane_is_made_where_one_thing_it_needs_is_missing(monkeypatch: pytest.MonkeyPatch, missing: str) -> None:
    """``None`` (the run stays on the general path) where exactly one thing the lane depends on is
    missing: a feed signature (a feed that needs the session's checks), the fused stage, its
    function, the rung's kept stacks, the stage's call layout, a feed the stage takes, a Variable it
    reads, a stack it takes, a kept stack it does not return, or a Variable's device copy. Kills the
    mutants that join two of the checks with ``and`` or drop one."""
    backend, h, sig = _parts()
    h.wide, backend._deep_nesting = False, False
    st = h.plan.fused
    if missing == "signature":
        sig["sig"] = None
    elif missing == "stage":
        h.plan.fused = None
    elif missing == "seg":
        st.fns = {}
    elif missing == "stacks":
        backend._stack_bufs = {}
    elif missing == "spec":
        st.spec = None
    elif missing == "feed":
        st.spec.args.feeds = [X, (2, 0)]
    elif missing == "variable":
        st.spec.args.state = ["var:v", "var:w"]
    elif missing == "stack":
        st.spec.args.stacks = ["s", "t"]
    elif missing == "returned":
        h.plan.kept = ["s", "u"]
    else:
        backend._dev_vars = {}
    assert _lane(monkeypatch, backend, h, sig) is None


def test_the_fused_call_takes_the_value_buffers_of_the_kept_stacks() -> None:
    """A staged run keeps each stack as a ``StackValue`` (buffer, index record, pointer); the fused
    call takes its value buffer alone, and a buffer the fused stage kept as it is. Kills the
    mutants of ``buffers_of`` that pass a record on, or its index record."""
    buf, idx = np.zeros((4, 2), np.float32), np.zeros((4, 1), np.int32)
    kept_by_fused = np.ones((4, 3), np.float32)
    got = buffers_of({"a": StackValue(4, np.float32, buf, idx, np.int32(0)), "b": kept_by_fused})
    assert got.keys() == {"a", "b"} and got["a"] is buf and got["b"] is kept_by_fused


def test_a_lanes_out_of_memory_is_the_fused_calls_resource_exhausted_error() -> None:
    """XLA's out-of-memory (``RESOURCE_EXHAUSTED``) from a lane's call is raised as the fused call's
    ``ResourceExhaustedError``, naming the fast backend and the whole program; any other error of
    the call returns, to be raised as it is. Kills the mutants of ``out_of_memory``."""
    with pytest.raises(ResourceExhaustedError, match=r"^fast backend: the device ran out of memory running the "
                                                     r"whole program \(its fused call\): RESOURCE_EXHAUSTED: 8 GiB"):
        out_of_memory(None, jax.errors.JaxRuntimeError("RESOURCE_EXHAUSTED: 8 GiB\nmore"))
    assert out_of_memory(None, jax.errors.JaxRuntimeError("INVALID_ARGUMENT: shape")) is None


def test_the_module_exports_what_it_defines() -> None:
    """Every name in ``fast.fused_lane.__all__`` (where it has one) is defined by the module
    (``tests/test_exports.py``'s law, for this module alone)."""
    from test_exports import test_every_exported_name_exists

    test_every_exported_name_exists("turnout.fast.fused_lane")


@pytest.mark.parametrize("message, raised", [("RESOURCE_EXHAUSTED: 8 GiB", ResourceExhaustedError),
                                             ("INTERNAL: a fault", jax.errors.JaxRuntimeError)])
def test_a_fused_lanes_failing_call_raises_the_general_paths_error(monkeypatch: pytest.MonkeyPatch, message: str,
                                                                   raised: type) -> None:
    """A fused lane's call that fails in XLA (its executable replaced by one that raises) raises what
    the fused call raises on the general path: ``ResourceExhaustedError`` naming the fast backend for
    an out-of-memory, any other error as it is. Kills the mutants that rename the lane's names of
    ``JaxRuntimeError`` and ``out_of_memory`` (read only when a call fails)."""
    def failing(fn: Any, args: Any, backend: Any) -> Any:
        def call(*a: Any) -> Any:
            raise jax.errors.JaxRuntimeError(message)
        return call

    monkeypatch.setattr(fused_lane, "ahead_of_time", failing)
    g, t = rnn_training_step()
    sess = tn.Session(g, backend="fast")
    loss, step = t["loss"], t["step"]
    feed = {t["x"]: np.array([0.1, -0.2, 0.3, 0.05], np.float32), t["n"]: 3}
    sess.run([loss, step], feed)
    with pytest.raises(raised, match=r"^fast backend: the device ran out of memory" if raised is ResourceExhaustedError
                       else "^INTERNAL: a fault$"):
        sess.run([loss, step], feed)
