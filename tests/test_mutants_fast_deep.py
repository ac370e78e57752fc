"""Laws of the deep-stack call (``turnout.fast.deep``): ``fn(*args)`` runs on a worker thread whose
recursion limit and stack fit the nesting, its value and its exception come back unchanged, the
caller's 64-bit mode goes with it, and the process-wide recursion limit is raised for the calls in
flight and put back by the last one out. Each law kills mutants of the full set of ``fast/deep.py``
(issue 40, part 3; ``python tools/mutation.py --module fast/deep.py --all``): the frames counted
down instead of up, the value or the error filed under another key, the thread unnamed or without
its target, the x64 flag dropped, the count of calls in flight started, raised or lowered wrongly
(nested calls, a thread that cannot start), the limit put back while a call is still in flight or
never, the stack size asked for or put back wrongly.

The calls run plain Python functions: no trace, no compile, so each test takes milliseconds. The
nested programs that take the deep thread for real are in ``test_fast_compile.py`` and
``test_fast_lane.py``.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import jax
import pytest

from turnout.fast import deep
from turnout.fast.deep import call_deep, frames_for, on_deep_thread
from turnout.graph import calls_from, user_site, warn_user


@pytest.fixture
def limit() -> Iterator[int]:
    """A recursion limit of this test's own (1500), put back afterwards whatever the test did; no
    deep call is left in flight."""
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(1500)
    try:
        yield 1500
    finally:
        sys.setrecursionlimit(before)
    assert deep._active[0] == 0


def _seen() -> dict[str, Any]:
    """What a function on the worker sees: its thread, its recursion limit, its 64-bit mode."""
    return {"deep": on_deep_thread(), "name": threading.current_thread().name,
            "main": threading.current_thread() is threading.main_thread(),
            "limit": sys.getrecursionlimit(), "x64": bool(jax.config.read("jax_enable_x64"))}


def test_the_frames_grow_with_the_nesting_and_never_lower_the_limit(limit: int) -> None:
    """``frames_for``: at least the limit in force, and beyond it about 15 frames a level (what one
    level of tracing takes) with headroom, growing with the nesting. Kills the limit dropped from the
    ``max`` (a ``TypeError``) and the frames per level subtracted instead of added."""
    assert frames_for(0) >= limit and frames_for(1) >= limit
    assert frames_for(200) >= 1000 + 15 * 200
    assert frames_for(400) > frames_for(200) > limit


def test_a_call_runs_on_the_named_worker_with_the_raised_limit_and_gives_back_its_value(limit: int) -> None:
    """``call_deep(fn, *args)`` is ``fn(*args)`` on the thread ``on_deep_thread`` recognises (not the
    caller's), under a recursion limit of at least ``frames_for(nesting)``; the caller's limit is as
    before once it returns. Kills the thread made without its target or under another name, the
    value filed or read under another key, ``on_deep_thread`` inverted or comparing another name,
    the frames set to None, and the limit never put back (the count of calls in flight started at
    1, or left above 0 by ``= 1``, or the last one out tested as ``!= 0`` or ``== 1`` or on the
    saved limit)."""
    args = (3, [4])
    got = call_deep(lambda a, b: (a, b, _seen()), *args, nesting=200)
    assert got[0] == 3 and got[1] is args[1]
    seen = got[2]
    assert seen["deep"] and not seen["main"] and seen["name"] != threading.current_thread().name
    assert seen["limit"] >= frames_for(200) > limit
    assert not on_deep_thread()
    assert sys.getrecursionlimit() == limit


def test_the_limit_put_back_is_the_one_found_by_each_first_call(limit: int) -> None:
    """The limit put back is the one in force when the first call in flight began, read afresh by
    each such call (a user may change it between runs). Kills the first call recognised by the saved
    limit (``_active[1] == 0``) or by ``== 1``, and a limit of None put back."""
    call_deep(lambda: None, nesting=200)
    assert sys.getrecursionlimit() == limit
    sys.setrecursionlimit(limit + 100)
    call_deep(lambda: None, nesting=200)
    assert sys.getrecursionlimit() == limit + 100


def test_a_nested_call_keeps_the_limit_until_the_outer_call_returns(limit: int) -> None:
    """Deep calls in flight share the process-wide limit: one made inside another (or beside it)
    neither lowers the limit nor puts it back when it returns, while the outer one runs; the last
    one out puts back the limit found by the first. Kills the count of calls in flight set to 1
    instead of raised (the inner call's return would put the limit back under the outer), lowered
    on entry, or the last one out tested as ``!= 0``."""
    def outer() -> tuple[int, int, bool]:
        inner = call_deep(lambda: (sys.getrecursionlimit(), on_deep_thread()), nesting=10)
        return inner[0], sys.getrecursionlimit(), inner[1]

    inner_limit, after_inner, inner_deep = call_deep(outer, nesting=300)
    assert inner_deep and inner_limit >= frames_for(300) and after_inner >= frames_for(300)
    assert sys.getrecursionlimit() == limit


def test_an_error_crosses_back_unchanged(limit: int) -> None:
    """An exception of ``fn`` (any ``BaseException``) is raised in the caller's thread as the very
    object raised on the worker, and the limit is put back. Kills the error filed or looked for under
    another key (a ``KeyError`` for the missing value instead) and the test inverted (a success then
    raises)."""
    class Stop(BaseException):
        pass

    err = Stop("from the worker")

    def fail() -> None:
        raise err

    with pytest.raises(Stop) as info:
        call_deep(fail, nesting=200)
    assert info.value is err
    assert sys.getrecursionlimit() == limit
    assert call_deep(lambda: "ok", nesting=0) == "ok"


@pytest.mark.parametrize("x64", [False, True])
def test_the_worker_runs_in_the_caller_s_64_bit_mode(limit: int, x64: bool) -> None:
    """JAX's configuration contexts are thread-local: the worker enters the caller's 64-bit mode, on
    or off. Kills the flag read under another name (an error), set to None, or not handed to
    ``jax.enable_x64``."""
    with jax.enable_x64(x64):
        assert call_deep(lambda: bool(jax.config.read("jax_enable_x64")), nesting=0) is x64


def _threading(**over: Any) -> SimpleNamespace:
    """A stand-in for the ``threading`` module as ``deep`` uses it, with ``over`` replacing members."""
    return SimpleNamespace(**{"Thread": threading.Thread, "stack_size": threading.stack_size,
                              "current_thread": threading.current_thread, **over})


def test_the_worker_s_stack_fits_the_frames_and_the_size_is_put_back(limit: int,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker is started with a stack of at least ``_MIN_STACK`` and at least ``_STACK_PER_FRAME``
    bytes per frame allowed (a raised limit backed by real stack), never less than the 8 MiB a main
    thread has by default on Linux however shallow the program, and the size for later threads is
    put back at once. Kills the old size not read (None put back), every broken ``max`` and the
    floor shifted right (``64 >> 20``: 0 bytes, leaving the 4 MB of 2000 frames)."""
    asked: list[tuple[int, ...]] = []

    def stack_size(*size: int) -> int:
        asked.append(size)
        return threading.stack_size(*size)

    monkeypatch.setattr(deep, "threading", _threading(stack_size=stack_size))
    before = threading.stack_size()
    nesting = 1000
    call_deep(lambda: None, nesting=nesting)
    assert [len(a) for a in asked] == [0, 1, 1]
    big = asked[1][0]
    assert big >= deep._MIN_STACK and big >= frames_for(nesting) * deep._STACK_PER_FRAME
    assert asked[2] == (before,) and threading.stack_size() == before
    asked.clear()
    call_deep(lambda: None, nesting=0)
    assert asked[1][0] >= max(8 << 20, frames_for(0) * deep._STACK_PER_FRAME)


def test_a_thread_that_cannot_start_leaves_nothing_behind(limit: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the worker cannot start, its error is raised, no call is left counted in flight and the
    limit and the stack size are as before, so that the next call puts back the right limit. Kills
    the count after a failed start set to 1, raised, or left alone (the saved limit lowered instead)."""
    class NoThread:
        def __init__(self, **kw: Any) -> None:
            pass

        def start(self) -> None:
            raise RuntimeError("can't start new thread")

    before = threading.stack_size()
    with monkeypatch.context() as m:
        m.setattr(deep, "threading", _threading(Thread=NoThread))
        with pytest.raises(RuntimeError, match="can't start"):
            call_deep(lambda: None, nesting=200)
    assert deep._active[0] == 0
    assert sys.getrecursionlimit() == limit and threading.stack_size() == before
    sys.setrecursionlimit(limit + 50)
    call_deep(lambda: None, nesting=200)
    assert sys.getrecursionlimit() == limit + 50


def test_a_warning_on_the_worker_names_the_line_that_made_the_deep_call(limit: int) -> None:
    """Regression: a warning raised on the worker (the fast backend's fallback warning, for a program
    nested past ``DEEP_NESTING``) named a line of ``threading``, the only frame outside Turnout on the
    worker's stack. The worker runs as called from its caller's line (``calls_from``), so the warning
    names the line that made the deep call; and the worker leaves no site behind on its thread."""
    with pytest.warns(RuntimeWarning, match="on the worker") as caught:
        line = sys._getframe().f_lineno + 1
        call_deep(warn_user, "raised on the worker", RuntimeWarning, nesting=0)
    assert (caught[0].filename, caught[0].lineno) == (__file__, line)


def test_a_site_inherited_by_a_thread_is_put_back_when_its_block_ends() -> None:
    """``calls_from`` lends a thread a site for its block alone, nested blocks included; outside them
    the thread has none to lend. The thread's work stands for Turnout's own code (compiled under the
    name of ``fast/deep.py``), so no frame of the user's is on its stack."""
    here = user_site()
    assert here is not None and here.filename == __file__ and here.module_globals is globals()
    other = type(here)("elsewhere.py", 7, {})
    out: list[Any] = []
    source = """
def work():
    out.append(user_site())
    with calls_from(other):
        out.append(user_site())
        with calls_from(here):
            out.append(user_site())
        out.append(user_site())
    out.append(user_site())
"""
    scope = {"out": out, "user_site": user_site, "calls_from": calls_from, "other": other, "here": here}
    exec(compile(source, deep.__file__, "exec"), scope)
    t = threading.Thread(target=scope["work"])
    t.start()
    t.join()
    assert out == [None, other, here, other, None]
