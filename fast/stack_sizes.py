"""The gradient stacks of a plan as sizes: their static shapes, their bytes at a capacity, which the
fused call makes inside itself, how errors name them, and the capacities of the ladder a fused
attempt climbs.

Why a module of its own: these are pure functions of the program's stack nodes and a capacity,
read by the plan (``fast.plan``), the backend and the partitioned executors alike; none of them
compiles anything. ``fast.plan`` re-exports them.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from typing import Any, Optional

import numpy as np

from turnout.fast import stacks as stk
from turnout.fast.regions import Program, item_nodes
from turnout.fast.state_keys import stack_key, stack_source
from turnout.fast.values import Handle
from turnout.fast_options import STACK_FIRST_RUNG, STACK_RUNG_RATIO
from turnout.graph import Node


def static_push_shapes(n: Node) -> Optional[tuple[tuple[int, ...], tuple[int, ...]]]:
    """StackPush ``n``'s (element shape, index shape), where both are static; else None. Every plan
    that allocates stacks before it runs reads pushes so (``static_stack_shapes``, the SPMD tier)."""
    v, i = n.inputs[2].shape, n.inputs[1].shape
    ok = v is not None and i is not None and all(isinstance(d, int) for d in (*v, *i))
    return (tuple(v), tuple(i)) if ok else None  # type: ignore[arg-type]


def static_stack_shapes(nodes: list[Node]) -> dict[int, tuple[tuple[int, ...], tuple[int, ...]]]:
    """StackNew id -> (element shape, index shape), for stacks whose every push has fully static
    shapes. Those stacks are allocated before the first stage (and their buffers reused by the next
    run), instead of materialized at their first push while tracing."""
    shapes: dict[int, Any] = {}
    for n in nodes:
        src = stack_source(n.inputs[0]) if n.op == "StackPush" else None
        if src is not None:
            got = static_push_shapes(n)
            shapes[src.id] = got if shapes.get(src.id, got) == got else None
    return {k: v for k, v in shapes.items() if v is not None}


def stack_bytes(capacity: int, dtype: Any, shapes: tuple[tuple[int, ...], tuple[int, ...]],
                record: bool = True) -> int:
    """The bytes of a static stack at ``capacity``: its value buffer and (``record``) its int32 index
    record."""
    elem, index = shapes
    return capacity * (math.prod(elem) * np.dtype(dtype).itemsize + (math.prod(index) * 4 if record else 0))


def inside_stacks(static: dict[str, tuple[Any, Any]], capacity: int, limit: int) -> dict[str, tuple[Any, Any]]:
    """The static stacks (key -> (dtype, (element shape, index shape))) whose value buffer at
    ``capacity`` is at most ``limit`` bytes (``FastOptions.inside_limit``: by default 32 KiB on the CPU,
    none elsewhere, ``turnout.fast_options.INSIDE_STACK_BYTES``): the fused stage makes them inside
    its call.

    Why: a buffer passed to a compiled call, donated and handed back costs the call a few
    microseconds of argument and result handling; making a small one inside costs less than that
    (a 16 KiB stack: 2.6 µs less per pair of stacks in a small RNN step, pinned to one core,
    2026-11-27; break-even near 64 KiB, and at 256 KiB making it costs 25 µs more). The buffer is
    then not kept between runs either, which is memory a small program no longer holds. Larger
    stacks are passed in and kept, so that a run allocates none of them (``Plan`` module docstring)."""
    return {k: (dtype, shapes) for k, (dtype, shapes) in static.items()
            if stack_bytes(capacity, dtype, shapes, record=False) <= limit}


def stack_infos(nodes: Iterable[Node]) -> dict[str, stk.StackInfo]:
    """Stack key -> its forward loop's name, how errors name it (with the user's source line of the
    loop, from its Enter nodes) and its ``swap_memory``, read from the ``StackNew`` attrs of ``nodes``.
    Both executors name stacks this way: this backend's plans and the partitioned executor's
    (``fast.device_stacks``)."""
    nodes = list(nodes)
    sources: dict[str, str] = {}
    for n in nodes:
        if n.op == "Enter" and n.source and n.attrs.get("frame_name") not in sources:
            sources[n.attrs["frame_name"]] = n.source
    out = {}
    for sn in nodes:
        if sn.op != "StackNew":
            continue
        a = sn.attrs
        frame = a.get("frame_name", "?")
        loop = a.get("loop_name") or frame
        where = f'loop "{loop}" (frame {frame}' + (f", created at {sources[frame]})" if frame in sources else ")")
        out[stack_key(Handle("stack", sn.id))] = stk.StackInfo(loop, where, bool(a.get("swap_memory", False)))
    return out


def capacity_ladder(top: int, first: int = STACK_FIRST_RUNG, ratio: float = STACK_RUNG_RATIO) -> list[int]:
    """The stack capacities a fused attempt may run at, smallest first, ending with ``top`` (the
    backend's ``stack_chunk``): ``first``, then each rung ``ratio`` times the last (rounded up), while
    under ``top`` (``FastOptions.stack_first_rung`` and ``stack_rung_ratio``). The default chunk
    (1024) gives 128, 160, 200, 250, 313, 392, 490, 613, 767, 959 and 1024; a chunk of at most
    ``first`` gives itself alone.

    Why geometric from a small first rung: a run holds the buffers of the first rung that fits it, so
    its stacks hold at most ``ratio`` times the entries it pushes (or ``first``), and a plan compiles
    at most ``len(capacity_ladder(...))`` fused programs, one per rung it uses (an attempt that
    outgrows its rung goes straight to the one that holds it), whatever its trip counts:
    ``1 + ceil(log(top / first) / log(ratio))``."""
    caps: list[int] = []
    c = first
    while c < top:
        caps.append(c)
        c = max(c + 1, math.ceil(c * ratio))
    return [*caps, top]


class StackMarks:
    """The high-water marks of a plan's last ``window`` runs — the most entries any of their gradient
    stacks held — and the rung of ``ladder`` the next run starts on: the smallest that holds every
    one of them.

    Why a window of runs, not the last run alone: a run that needs more than its rung starts again on a
    larger one (a fused attempt wasted), so a plan whose runs alternate between lengths should stay on
    the rung of the longer; one whose runs all became shorter should not hold the buffers of a rung
    it no longer needs (after a run of 1000 iterations of the benchmark LSTM, 640 MiB where runs of
    100 need 80). Climbing is at once (the run that needed it is in the window); descending waits
    until ``window`` runs in a row fitted the lower rung (``FastOptions.stack_descend_after``)."""

    def __init__(self, ladder: list[int], window: int) -> None:
        self.ladder = ladder
        self.recent: deque[int] = deque(maxlen=max(1, window))
        #: the mark of a run a lane handed back because it outgrew the lane's rung: the general path
        #: runs it again from the rung that holds it, and notes it once, when it has run
        self.pending = 0

    def note(self, mark: int) -> int:
        """Record a run's mark (once per run that a fused attempt finished); returns the capacity the
        next run starts at (``start``)."""
        self.recent.append(mark)
        self.pending = 0
        return self.start()

    def begin(self) -> int:
        """The rung a run of the general path starts on (``start``); a handed-back run's mark, which
        chose it, is then spent (the run is noted once it has run, or not at all if it goes to the
        stages)."""
        c = self.start()
        self.pending = 0
        return c

    def start(self) -> int:
        """The smallest rung holding every mark of the window and a handed-back run's (the first rung
        before any run), or the top when none does: a run past the top goes to the stages, whatever
        rung it starts on."""
        need = max(max(self.recent, default=0), self.pending)
        return next((c for c in self.ladder if c >= need), self.ladder[-1])


def filled_and_emptied_inside(program: Program) -> bool:
    """Whether some gradient stack of ``program`` is both pushed and popped inside one root region (a
    loop whose body takes the gradient of a loop of its own, say): its most entries are then never
    seen between root items, only as a loop inside that region leaves (``Emitter.note_mark``)."""
    for it in program.items:
        if isinstance(it, Node):
            continue
        pushed: set[int] = set()
        popped: set[int] = set()
        for n in item_nodes(it):
            src = stack_source(n.inputs[0]) if n.op in ("StackPush", "StackPop") else None
            if src is not None:
                (pushed if n.op == "StackPush" else popped).add(src.id)
        if pushed & popped:
            return True
    return False


def stack_source_var(n: Node) -> Optional[str]:
    """The Variable whose value a stack op's handle (``n.inputs[0]``) reads through Enter, Switch,
    Identity and Merge, or None: a Variable's gradient stack names it so."""
    src = n.inputs[0].node
    while src.op in ("Enter", "Switch", "Identity", "Merge") and src.raw_inputs:
        src = src.inputs[0].node
    return src.attrs.get("var_name") if src.op == "VarHandle" else None


def variables_of(nodes: Iterable[Node]) -> tuple[dict[str, Node], set[Optional[str]]]:
    """The Variables ``nodes`` use (name -> VarHandle) and those they assign, as every plan reads them."""
    nodes = list(nodes)
    return ({n.attrs["var_name"]: n for n in nodes if n.op == "VarHandle"},
            {stack_source_var(n) for n in nodes if n.op.startswith("Assign")} - {None})


def stack_dtype(sn: Node) -> Any:
    """The numpy dtype of the entries of the stack StackNew ``sn`` makes (its ``elem_dtype`` or
    ``dtype``), float32 where it names none that numpy reads."""
    for k in ("elem_dtype", "dtype"):
        if sn.attrs.get(k):
            try:
                return np.dtype(sn.attrs[k])
            except TypeError:
                pass
    return np.float32
