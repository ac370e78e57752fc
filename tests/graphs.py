"""Small graphs that several test files build alike (imported by bare name: conftest puts tests/ on
sys.path, as for programs.py and strategies.py)."""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

import numpy as np

import turnout as tn
from turnout import raw


class PowerLoop(NamedTuple):
    g: tn.Graph
    x: tn.Tensor
    n: tn.Tensor
    y: tn.Tensor
    dx: tn.Tensor


def power_loop(swap_memory: bool = False) -> PowerLoop:
    """``y = x**n`` by a while_loop whose trip count ``n`` is fed at run time, and ``dy/dx = n x**(n-1)``:
    one stacked value per iteration, the smallest gradient that exercises the stacks. ``swap_memory`` is
    the loop's (where full stack chunks go on the fast backend)."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float64, [], name="x")
        n = tn.placeholder(tn.int32, [], name="n")
        _, y = tn.while_loop(lambda i, y: i < n, lambda i, y: (i + 1, y * x), [tn.constant(0), tn.ones_like(x)],
                             swap_memory=swap_memory)
        (dx,) = tn.gradients(y, [x])
    return PowerLoop(g, x, n, y, dx)


def vector_loop_round_robin(devices: list[str]) -> tuple[tn.Graph, PowerLoop, dict[str, str]]:
    """``v <- tanh(v) * 1.1`` for ``n`` steps over a vector ``x`` whose length is fed (shape
    ``[None]``), with the gradient of ``sum(v)``: the gradient pushes the shape of each step's value
    and its backward loop fills with it. Returns the graph, its tensors (as ``PowerLoop`` names
    them) and requests placing its nodes round robin over ``devices``."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float64, [None], name="x")
        n = tn.placeholder(tn.int32, [], name="n")
        _, y = tn.while_loop(lambda i, v: i < n, lambda i, v: (i + 1, tn.tanh(v) * 1.1), [tn.constant(0), x],
                             parallel_iterations=1)
        (dx,) = tn.gradients(tn.reduce_sum(y), [x])
    return g, PowerLoop(g, x, n, y, dx), {node.name: devices[k % len(devices)] for k, node in enumerate(g.nodes)}


def nested_loops(depth: int) -> tuple[tn.Graph, tn.Tensor, tn.Tensor, tn.Tensor]:
    """``benchmarks/compile_time.py``'s nest: ``depth`` while loops named ``level{depth}`` (outermost)
    to ``level1``, each running ``trips`` iterations (fed), around ``v * 1.5 + 1.0``. Returns (graph,
    x, trips, y)."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        trips = tn.placeholder(tn.int32, [], name="trips")

        def loops(d: int, v: Any) -> Any:
            if d == 0:
                return v * 1.5 + 1.0
            return tn.while_loop(lambda i, w: i < trips, lambda i, w: (i + 1, loops(d - 1, w)),
                                 [tn.constant(0), v], name=f"level{d}")[1]

        y = loops(depth, x)
    return g, x, trips, y


class ExitWaiter(NamedTuple):
    g: tn.Graph
    n: tn.Tensor
    total: tn.Tensor
    inner_sum: tn.Tensor
    exit_node: Any  # the inner loop's Exit that the waiter waits on
    outer_frame: str  # the frame of the loop holding the waiter, as tags spell it
    top_frame: str | None  # the frame of the loop around it, if any ("" when ``wrapped`` is False)
    rounds: int  # how many times the loop holding the waiter runs (1, or the wrapping loop's trip count)


def nested_exit_waiter(wrapped: bool = False) -> ExitWaiter:
    """An outer loop over ``i < n`` whose body runs an inner loop counting ``j`` up to ``i`` and then a
    *waiter* (``acc + i``, named ``waiter``) that reads no value of the inner loop: its only tie to it
    is a control edge from the inner loop's Exit. The Exit fires in iteration ``i`` of the outer frame,
    so its control token must reach the waiter at that same outer tag. Fetches: ``total`` (the sum of
    ``i`` over the iterations, from the waiter) and ``inner_sum`` (the sum of the inner loops' final
    ``j``, i.e. of ``i``). ``wrapped``: the whole program runs twice, in the body of a third loop, so
    the Exit's tag has three levels and its parent is neither the root nor the first level alone; the
    fetches are then the sums over both rounds."""
    g = tn.Graph()
    rounds = 2 if wrapped else 1
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")
        exits: list[Any] = []

        def outer(i: tn.Tensor, acc: tn.Tensor, s: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor, tn.Tensor]:
            (j,) = tn.while_loop(lambda j: j < i, lambda j: j + 1, [tn.constant(0)], name="inner")
            exits.append(j.node)
            with tn.control_dependencies([j.node]):
                w = tn.add(acc, i, name="waiter")
            return i + 1, w, s + j

        def program(total: tn.Tensor, inner_sum: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor]:
            _, t, s = tn.while_loop(lambda i, acc, s: i < n, outer,
                                    [tn.constant(0), tn.constant(0), tn.constant(0)], name="outer")
            return total + t, inner_sum + s

        zero = (tn.constant(0), tn.constant(0))
        if wrapped:
            _, total, inner_sum = tn.while_loop(lambda r, a, b: r < rounds,
                                                lambda r, a, b: (r + 1, *program(a, b)),
                                                [tn.constant(0), *zero], name="top")
        else:
            total, inner_sum = program(*zero)

    def frame_of(prefix: str) -> str:
        return str(next(nd.attrs["frame_name"] for nd in g.nodes if nd.op == "Enter" and nd.name.startswith(prefix)))

    top = frame_of("top/") if wrapped else None
    return ExitWaiter(g, n, total, inner_sum, exits[0], frame_of("top/body/outer/" if wrapped else "outer/"),
                      top, rounds)


def cond_split_over_two_devices() -> tuple[tn.Graph, tn.Tensor, tn.Tensor, tn.Tensor]:
    """``z = x * 10 if p else x - 1`` with the taken branch's multiply on ``cpu:1``: a cond whose
    partitions exchange Send/Recv pairs. Returns ``(graph, p, x, z)``."""
    g = tn.Graph()
    with g.as_default():
        p = tn.placeholder(tn.bool, shape=[], name="p")
        x = tn.placeholder(tn.int32, shape=[], name="x")

        def taken() -> tn.Tensor:
            with tn.device("cpu:1"):
                return x * 10

        z = tn.cond(p, taken, lambda: x - 1)
    return g, p, x, z


def exit_every_iteration() -> tn.Tensor:
    """In the default graph: a hand-built loop of three iterations whose Exit (named ``each``) is taken
    from the Switch's *true* branch, so it fires live in every iteration and delivers at the root tag
    each time (a graph that breaks [W-Merge-Unique]). Returns that Exit's output."""
    m, _ = raw.merge([raw.enter(tn.constant(0), "f"), raw.BACK_EDGE])
    _, st = raw.switch(m, raw.loop_cond(m < raw.enter(tn.constant(3), "f", is_constant=True)))
    raw.close_back_edge(m, raw.next_iteration(st + raw.enter(tn.constant(1), "f", is_constant=True)))
    return raw.exit(st, name="each")


def every_kind_of_node() -> tn.Graph:
    """A graph with a loop, a cond, a TensorArray and a Variable: every kind of node a file holds."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [2], name="x")
        v = tn.Variable(np.ones(2, np.float32), name="v")
        ta = tn.TensorArray(tn.float32, size=3)

        def body(i: tn.Tensor, a: Any, s: tn.Tensor) -> tuple[Any, ...]:
            return i + 1, a.write(i, s), tn.cond(i > 1, lambda: s * 2.0, lambda: s + v.read())

        _, ta, s = tn.while_loop(lambda i, a, s: i < 3, body, [tn.constant(0), ta, x])
        tn.identity(ta.stack() + s, name="out")
    return g


def recomputed_tanh_loop(steps: int, slots: int) -> tuple[tn.Graph, tn.Tensor, tn.Tensor]:
    """``v <- tanh(v)`` for ``steps`` steps on a fed ``x`` of 4 float32s, named ``rnn``, under a loop
    budget of ``slots`` checkpoint states (24 bytes each: the counter, the state, its position), and
    the gradient of its sum w.r.t. ``x``: (graph, x, gradient). The loop the slot-sizing laws use."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [4], name="x")
        _, y = tn.while_loop(lambda i, v: i < steps, lambda i, v: (i + 1, tn.tanh(v)), [tn.constant(0), x],
                             name="rnn", memory_budget=slots * 24)
        (gx,) = tn.gradients(tn.reduce_sum(y), [x])
    return g, x, gx


def inner_loop_on_the_second_device(inner: int, outer: int) -> tuple[tn.Graph, list[tn.Tensor], dict[tn.Tensor, Any]]:
    """``[y, dy/dx]`` of ``y = x**(inner * outer)`` at ``x = 1.01``: an outer loop of ``outer``
    iterations on cpu:0 whose body runs an inner loop of ``inner`` multiplications on cpu:1, so the
    inner loop's gradient pushes ``inner`` entries within one segment call there."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float64, [], name="x")

        def body(i: tn.Tensor, y: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor]:
            with tn.device("cpu:1"):
                _, y2 = tn.while_loop(lambda j, y: j < inner, lambda j, y: (j + 1, y * x), [tn.constant(0), y])
            with tn.device("cpu:0"):
                return i + 1, y2 + 0.0

        with tn.device("cpu:0"):
            _, y = tn.while_loop(lambda i, y: i < outer, body, [tn.constant(0), tn.ones_like(x)])
        (dx,) = tn.gradients(y, [x])
    return g, [y, dx], {x: 1.01}


def rnn_training_step() -> tuple[tn.Graph, dict[str, Any]]:
    """A training step through a loop: a tanh recurrence over ``n`` fed steps (``x``, ``n``), its
    weights ``w`` a Variable trained by SGD (``loss``, ``step``; ``h`` the last state); the gradient's
    stacks make it a fused plan on the fast backend."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [4], name="x")
        n = tn.placeholder(tn.int32, [], name="n")
        w = tn.Variable(np.array([0.5, -0.4, 0.3, 0.2], np.float32), name="w")
        _, h = tn.while_loop(lambda i, h: i < n, lambda i, h: (i + 1, tn.tanh(h * w.read() + x)),
                             [tn.constant(0), tn.zeros([4], tn.float32)])
        loss = tn.reduce_sum(h * h)
        step = tn.train.SGD(0.1).minimize(loss)
    return g, {"x": x, "n": n, "w": w, "h": h, "loss": loss, "step": step}


def host_shape_filled_on_the_second_device(sleep: bool = False) -> tuple[tn.Graph, tn.Tensor, tn.Tensor]:
    """``(graph, x, y)``: a shape computed from a fed ``x`` of shape [2, 3] on cpu:0 (a value known on
    the host while tracing) read by a ``fill`` of 1.5 on cpu:1; ``sleep`` puts a zero ``Sleep`` (a host
    callback) after the fill, which makes the partitioned executor dispatch from worker threads."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, shape=[2, 3], name="x")
        with tn.device("cpu:0"):
            s = tn.shape(x) * 2
        with tn.device("cpu:1"):
            y = tn.fill(s, 1.5)
            if sleep:
                y = tn.sleep(y, 0.0)
    return g, x, y


class BatchLoop(NamedTuple):
    g: tn.Graph
    x: tn.Tensor
    w: tn.Tensor
    loss: tn.Tensor
    gx: tn.Tensor
    gw: tn.Tensor


def batch_loop(width: int, steps: int, rows: Optional[int] = None) -> BatchLoop:
    """``h = tanh(h w)`` ``steps`` times from ``x``, a batch of ``rows`` rows of ``width``, and the
    gradients of ``sum(h * h)``. With ``rows`` None (the default), gradient stacks whose shapes the
    graph does not know, only a plan's trace for one batch size."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [rows, width], name="x")
        w = tn.placeholder(tn.float32, [width, width], name="w")
        _, h = tn.while_loop(lambda i, h: i < steps, lambda i, h: (i + 1, tn.tanh(tn.matmul(h, w))),
                             [tn.constant(0), x])
        loss = tn.reduce_sum(h * h)
        gx, gw = tn.gradients(loss, [x, w])
    return BatchLoop(g, x, w, loss, gx, gw)
