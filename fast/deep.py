"""Run a deeply recursive computation on a thread with a large stack and a high recursion limit.

Why: lowering walks the region tree recursively, and so does JAX — each ``lax.cond`` or
``lax.while_loop`` traces its branches inside the enclosing trace, and XLA lowering recurses into
nested computations. A program nested ``k`` deep needs about 15 Python frames per level, so 100 nested
conds exceed Python's default limit of 1000 frames. Raising the limit alone is not safe: frames that
pass through C (JAX's C++ pytrees and jit dispatch) also use the C stack, and the main thread's stack
may be small. A worker thread is given a large stack (``threading.stack_size``), so the raised limit
is always backed by real stack. Results and exceptions cross back unchanged.

JAX's configuration contexts are thread-local: the worker enters ``jax.enable_x64`` itself. So is
the user's line a warning names: the worker runs as called from its caller's (``calls_from``).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import jax

from turnout.graph import calls_from, user_site

T = TypeVar("T")

#: region nesting from which a plan's runs use the deep stack (below it the default limit suffices)
DEEP_NESTING = 24
#: Python frames allowed per level of nesting, and the C stack reserved per frame (bytes)
_FRAMES_PER_LEVEL = 40
_STACK_PER_FRAME = 2048
_MIN_STACK = 64 << 20

_limit_lock = threading.Lock()
_active = [0, 0]  # deep calls in flight, the recursion limit before the first of them


def frames_for(nesting: int) -> int:
    """The recursion limit a program nested ``nesting`` deep needs, with headroom."""
    return max(sys.getrecursionlimit(), 2000 + _FRAMES_PER_LEVEL * nesting)


def call_deep(fn: Callable[..., T], *args: Any, nesting: int) -> T:
    """``fn(*args)`` on a worker thread whose stack and recursion limit fit ``nesting`` levels.

    The recursion limit is process-wide: it is raised for the call (never lowered while deep calls
    are in flight) and put back when the last deep call in flight returns.
    """
    frames = frames_for(nesting)
    out: dict[str, Any] = {}
    x64 = bool(jax.config.read("jax_enable_x64"))
    site = user_site()

    def work() -> None:
        try:
            with jax.enable_x64(x64), calls_from(site):
                out["value"] = fn(*args)
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread below
            out["error"] = e

    with _limit_lock:
        if _active[0] == 0:
            _active[1] = sys.getrecursionlimit()
        _active[0] += 1
        if frames > sys.getrecursionlimit():
            sys.setrecursionlimit(frames)
        old_size = threading.stack_size()
        threading.stack_size(max(_MIN_STACK, frames * _STACK_PER_FRAME))
        try:
            t = threading.Thread(target=work, name="turnout-fast-deep")
            t.start()
        except BaseException:
            _leave()  # (a thread that cannot start leaves the limit as a finished call does)
            raise
        finally:
            threading.stack_size(old_size)
    t.join()
    with _limit_lock:
        _leave()
    if "error" in out:
        raise out["error"]
    return out["value"]  # type: ignore[no-any-return]


def _leave() -> None:
    """One deep call fewer in flight (called under ``_limit_lock``): the last one out puts back the
    recursion limit the first one found."""
    _active[0] -= 1
    if _active[0] == 0:
        sys.setrecursionlimit(_active[1])


def on_deep_thread() -> bool:
    """Whether the caller already runs inside ``call_deep``."""
    return threading.current_thread().name == "turnout-fast-deep"

