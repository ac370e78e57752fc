"""The small-step system over a set of partitions with a shared rendezvous ([E-Send], [E-Recv],
[E-Recv-Dead]): exhaustive exploration of every interleaving of the partitions' steps on small graphs
(confluence across partitions), and random maximal runs on a loop spanning devices.

The exhaustive loop case visits tens of thousands of configurations; it runs in the nightly profile
(``TURNOUT_HYPOTHESIS_PROFILE=nightly``) and the zero-trip loop in the default run.
"""

from __future__ import annotations

import os
from typing import Any

import graphs
import numpy as np
import pytest

import turnout as tn
from turnout.devices import partition, place
from turnout.devices import smallstep as pss
from turnout.semantics.explore import value_repr

D2 = ["cpu:0", "cpu:1"]
NIGHTLY = os.environ.get("TURNOUT_HYPOTHESIS_PROFILE") == "nightly"


def _system(g: tn.Graph, fetches: list[tn.Tensor], feeds: dict[tn.Tensor, Any]) -> pss.System:
    parted = partition(g, place(g, D2), fetches, {(t.node.id, t.index) for t in feeds})
    return pss.system(parted, feeds)


def _want(g: tn.Graph, fetches: list[tn.Tensor], feeds: dict[tn.Tensor, Any]) -> tuple[Any, ...]:
    vals = tn.Session(g).run(fetches, feeds)
    return tuple(("live", value_repr(np.asarray(v))) for v in vals)


@pytest.mark.parametrize("pv", [True, False])
def test_every_interleaving_of_a_cond_across_devices_gives_the_unpartitioned_result(pv: bool) -> None:
    g, p, x, z = graphs.cond_split_over_two_devices()
    feeds = {p: pv, x: 3}
    r = pss.explore(_system(g, [z], feeds))
    assert r.complete and not r.stuck
    assert r.outcomes == {_want(g, [z], feeds)}


def _loop() -> tuple[tn.Graph, tn.Tensor, tn.Tensor]:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.int32, shape=[], name="x")

        def body(i: tn.Tensor) -> tn.Tensor:
            with tn.device("cpu:1"):
                return i + 1

        (y,) = tn.while_loop(lambda i: i < x, body, [tn.constant(0)], parallel_iterations=1)
    return g, x, y


@pytest.mark.parametrize("n", [0, 1] if NIGHTLY else [0])
def test_every_interleaving_of_a_loop_across_devices_gives_the_unpartitioned_result(n: int) -> None:
    g, x, y = _loop()
    r = pss.explore(_system(g, [y], {x: n}), max_states=100_000)
    assert r.complete and not r.stuck
    assert r.outcomes == {_want(g, [y], {x: n})}


@pytest.mark.parametrize("seed", range(5))
def test_random_partitioned_small_step_runs_of_a_loop(seed: int) -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.int32, shape=[], name="x")

        def body(i: tn.Tensor, y: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor]:
            with tn.device("cpu:1"):
                y2 = y * 2
            return i + 1, y2

        _, y = tn.while_loop(lambda i, y: i < 3, body, [tn.constant(0), x], parallel_iterations=2)
    s = _system(g, [y], {x: 3})
    got, final = pss.run(s, seed)
    assert got == _want(g, [y], {x: 3})
    assert not any(c.mailbox for c in final.configs)


def test_a_recv_alone_waits_forever_in_the_single_graph_system() -> None:
    from turnout.semantics import smallstep as ss

    g = tn.Graph()
    r = g.create_node("Recv", [], {"edge": "e", "src_device": "a", "dst_device": "b", "credit": 1,
                                   "control": False, "dtype": "int32", "shape": []})
    c = ss.initial(g, [r.outputs[0]])
    assert ss.enabled(c) == []
