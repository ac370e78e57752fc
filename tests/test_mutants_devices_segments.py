"""Laws of a placed program's steps (``turnout.devices.segments``): the cut of a placed program is the
compiled side's one cut (``fast.cut.schedule``) with each segment labelled by its device's short
name, and its steps are printed as ``fast.explain.cut_steps`` prints any cut, each naming its device
and each driven loop saying where its full stack chunks go. Each law kills mutants of the full set of
``devices/segments.py`` (issue 40, part 3; ``python tools/mutation.py --module devices/segments.py
--all``): the program, placement, fed nodes or label not passed on, a step without its device, a
driven loop's capacity lost, the swap of its stacks read wrongly from the plan's stack records.

The program is raised by ``functionalize`` and cut directly, with devices given per node name; the
plan is a stand-in holding only what ``steps_of`` reads (its schedule, capacity and stack records).
Nothing is compiled or run, so each test takes milliseconds.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

import turnout as tn
from turnout.devices.names import canonical, parse
from turnout.devices.segments import placed_schedule, steps_of
from turnout.fast import cut
from turnout.fast.cut import HostLoop, Schedule, Segment
from turnout.fast.functionalize import functionalize
from turnout.fast.regions import Program, item_nodes, key, walk

C0, C1 = canonical("cpu:0"), canonical("cpu:1")
CAPACITY = 7


def _placed() -> tuple[Program, dict[int, str], set[int]]:
    """A loop of tanh and its gradient on cpu:1 (both loops driven there: the forward loop pushes two
    stacks, the backward loop pops them), and a loop spanning cpu:0 and cpu:1 (its sin on cpu:1, the
    rest on cpu:0: a host loop), whose result meets the gradient on cpu:0. Devices are given by
    their full names, as placement gives them; ``x`` and ``n`` are fed."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        n = tn.placeholder(tn.int32, [], name="n")
        _, y = tn.while_loop(lambda i, h: i < n, lambda i, h: (i + 1, tn.tanh(h) * 1.1), [tn.constant(0), x],
                             name="grad")
        (dx,) = tn.gradients(y, [x])
        _, z = tn.while_loop(lambda i, h: i < n, lambda i, h: (i + 1, tn.sin(h, name="on_b")), [tn.constant(0), x],
                             name="span")
        w = tn.add(z, dx, name="w")
    program = functionalize(g, [y, dx, w], [x, n])

    def device(name: str) -> str:
        return C0 if (name.startswith("span") and not name.endswith("on_b")) or name == "w" else C1

    device_of = {nd.id: device(nd.name) for it in walk(program.items) for nd in item_nodes(it)}
    return program, device_of, {x.node.id, n.node.id}


def _segments(steps: list[Any]) -> list[Segment]:
    """Every segment of ``steps`` in run order (a host loop's header, body and exit side)."""
    out: list[Segment] = []
    for s in steps:
        if isinstance(s, Segment):
            out.append(s)
        else:
            assert isinstance(s, HostLoop)  # (this program has no host cond)
            out += _segments(s.header) + _segments(s.body) + _segments(s.exit_side)
    return out


def _shape(sched: Schedule) -> list[tuple[Any, ...]]:
    """What a schedule says about each segment: index, device, label, items, the keys it reads and
    gives back, and its driven loop."""
    return [(s.index, s.device, s.label, [id(it) for it in s.items], s.reads, s.writes, s.fetched, id(s.driven))
            for s in _segments(sched.steps)]


def test_a_placed_schedule_is_the_cut_with_each_segment_labelled_by_its_devices_short_name() -> None:
    """The law of one cut: ``placed_schedule`` is ``fast.cut.schedule`` of the same program, placement
    and fed nodes, and each segment's label (what its traces and errors say) is its device's short
    name, ``cpu:1`` for ``/job:localhost/task:0/device:CPU:1``. Fed nodes are read, not made: the
    segments read the fed keys. Kills each argument not passed on, the label dropped (the full name,
    ``str``), ``None`` or the short name of ``None``."""
    program, device_of, fed = _placed()
    sched = placed_schedule(program, device_of, fed)
    want = cut.schedule(program, device_of, fed, label=lambda d: parse(d).short)
    assert _shape(sched) == _shape(want)
    assert [(hl.devices, hl.home) for hl in sched.host_loops] == [([C0, C1], C0)]
    segs = _segments(sched.steps)
    assert {s.label for s in segs} == {"cpu:0", "cpu:1"}
    assert all(s.label == parse(s.device).short and f" on {s.label}:" in s.describe() for s in segs)
    fed_keys = {key(o) for it in walk(program.items) for nd in item_nodes(it) if nd.id in fed for o in nd.outputs}
    assert fed_keys <= {k for s in segs for k in s.reads}
    assert sum(s.driven is not None for s in segs) == 2  # the forward loop and its gradient, both on cpu:1


def _steps(stack_info: dict[str, Any]) -> tuple[Any, ...]:
    """``steps_of`` a stand-in plan of ``_placed``'s schedule with ``CAPACITY`` and ``stack_info``
    (stack key -> a record whose ``swap`` says whether the stack swaps to host memory)."""
    program, device_of, fed = _placed()
    plan = SimpleNamespace(schedule=placed_schedule(program, device_of, fed), capacity=CAPACITY, stack_info=stack_info)
    return steps_of(plan)  # type: ignore[arg-type]


def _forward_pushes() -> list[str]:
    """The stacks the driven forward loop pushes."""
    program, device_of, fed = _placed()
    (forward,) = [s for s in placed_schedule(program, device_of, fed).segments if s.driven is not None and s.push]
    return sorted(forward.push)


def test_each_step_names_its_device_by_its_short_name() -> None:
    """Every printed step sits on its device, named short: compiled calls and driven loops on their
    segment's device, a host loop on its home device and over every device it spans; each driven loop
    runs at most the plan's capacity of iterations per call. Kills the label (or the capacity)
    dropped, ``None`` or the short name of ``None``, and the plan's steps not passed on."""
    steps = _steps({})
    flat = [s for top in steps for s in (top, *(x for part in top.steps for x in part.steps))]
    kinds = [s.kind for s in steps]
    assert kinds == ["compiled call", "compiled call", "driven loop", "compiled call", "driven loop", "host loop",
                     "compiled call"]
    assert [s.device for s in steps] == ["cpu:0", "cpu:1", "cpu:1", "cpu:1", "cpu:1", "cpu:0", "cpu:0"]
    assert all(s.device in ("cpu:0", "cpu:1") for s in flat if s.kind != "staged")
    (host,) = [s for s in steps if s.kind == "host loop"]
    assert host.what.endswith(" over cpu:0, cpu:1")
    assert {x.device for part in host.steps for x in part.steps} == {"cpu:0", "cpu:1"}
    driven = [s for s in steps if s.kind == "driven loop"]
    assert all(f"at most {CAPACITY} iterations per call" in s.what for s in driven)


@pytest.mark.parametrize(("swaps", "where"), [
    ({}, "kept on the device"),  # no record for the stacks: they stay
    ({0: False, 1: False}, "kept on the device"),
    ({0: True, 1: False}, "swapped to host memory"),  # one stack that swaps is enough
    ({0: False, 1: True}, "swapped to host memory"),
])
def test_a_driven_loop_swaps_its_chunks_where_a_stack_it_pushes_swaps(swaps: dict[int, bool], where: str) -> None:
    """A driven loop's full stack chunks go to host memory where the plan's record of a stack it
    pushes says ``swap``; a stack with no record, or records that say no swap, keep them on the
    device. The backward loop pushes nothing, so its chunks stay. Kills the stack records not read
    (``info = None``), the test joined by ``or``, negated (``not in``) or made ``None``, and the
    swap test passed as the label."""
    pushed = _forward_pushes()
    assert len(pushed) == 2
    info = {pushed[i]: SimpleNamespace(swap=s) for i, s in swaps.items()}
    forward, backward = [s for s in _steps(info) if s.kind == "driven loop"]
    assert forward.what.endswith(f"full stack chunks {where}")
    assert backward.what.endswith("full stack chunks kept on the device")
