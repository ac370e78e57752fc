"""``devices/ray_runtime.py`` where mutation testing found it unchecked (``python tools/mutation.py
--module devices/ray_runtime.py``). Ray runs the ``TaskActor`` of each task in a worker process, which
imports the unmutated module, so the Ray tests never reach a mutant of it; here two actors run in this
process instead, wired by handles that call them directly, as the actor methods are plain Python.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest
from cluster_programs import SPEC, T0, T1, cond_across_tasks, loop_across_tasks

import turnout as tn
from turnout.devices import partition, place
from turnout.devices.task_runner import TaskOutcome, split_by_task, split_feeds
from turnout.session import RunOptions

pytest.importorskip("ray")

from turnout.devices.ray_runtime import TaskActor  # noqa: E402


class _Handle:
    """Stands in for a Ray actor handle: ``handle.method.remote(*args)`` calls the actor's method."""

    def __init__(self, actor: TaskActor) -> None:
        self.actor = actor

    def __getattr__(self, method: str) -> Any:
        return type("_Remote", (), {"remote": staticmethod(getattr(self.actor, method))})


def _actors() -> dict[str, TaskActor]:
    actors = {t.name: TaskActor(t.name) for t in SPEC.tasks}
    handles = {t: _Handle(a) for t, a in actors.items()}
    for a in actors.values():
        a.connect(handles)
    return actors


def _run(actors: dict[str, TaskActor], g: tn.Graph, fetch: tn.Tensor, feeds: dict[tn.Tensor, Any],
         run_id: int) -> list[Any]:
    parted = partition(g, place(g, SPEC.devices), [fetch], {(t.node.id, t.index) for t in feeds})
    plans = split_by_task(parted, lambda d: SPEC.task_of(d).name)
    fed = {(t.node.id, t.index): np.asarray(v, t.dtype.numpy) for t, v in feeds.items()}
    task_feeds = split_feeds(parted, lambda d: SPEC.task_of(d).name, fed)
    out: dict[str, Any] = {}
    for t, plan in plans.items():
        actors[t].prepare(("plan", run_id), plan, "reference")

    def go(t: str) -> None:
        try:
            out[t] = actors[t].run(run_id, ("plan", run_id), task_feeds.get(t, {}), RunOptions(), 10.0, False,
                                   "store")
        except Exception as e:  # noqa: BLE001 - returned to the test
            out[t] = e

    threads = [threading.Thread(target=go, args=(t,)) for t in plans]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    got = {}
    for o in out.values():
        assert isinstance(o, TaskOutcome), o
        got.update({i: v for i, v, dead in o.values if not dead})
    return [got[i] for i in sorted(got)]


def test_task_actors_forward_runs_messages_and_variables_to_their_runners() -> None:
    actors = _actors()
    g, x, y = loop_across_tasks(8, parallel_iterations=2)
    np.testing.assert_equal(_run(actors, g, y, {x: 2.0}, 1), [tn.Session(g).run(y, {x: 2.0})])
    g, x, out = cond_across_tasks()
    for k, value in enumerate((2.0, -2.0)):
        np.testing.assert_equal(_run(actors, g, out, {x: value}, 2 + k), [tn.Session(g).run(out, {x: value})])
    a = actors[T1]
    a.set_variables({"w": np.float32(1.5)}, "store")
    assert a.variable_names("store") == ["w"] and a.get_variables(["w"], "store") == {"w": np.float32(1.5)}
    a.delete_variables(["w"], "store")
    assert a.variable_names("store") == [] and actors[T0].variable_names("store") == []
    a.abort(99, f"task {T0} died")
    with pytest.raises(tn.TaskFailedError, match="died"):
        a.run(99, ("plan", 1), {}, RunOptions(), 10.0, False, "store")
