"""Laws of the local test cluster (``turnout.devices.local_cluster.LocalCluster``): what it asks Ray to
start, how it refuses to take over a Ray session it does not own, what it gives back and what it stops.
They kill mutants of the full set of ``devices/local_cluster.py`` (issue 40, part 3). Ray and psutil are
stand-ins here (modules put in ``sys.modules`` for one test, restored after it), which record every
call, so no Ray process starts and each request can be read exactly; ``tests/test_ray.py`` starts the
real cluster and checks its sockets."""

from __future__ import annotations

import os
import sys
import types
from typing import Any

import pytest

from turnout.devices import local_cluster as lc_module
from turnout.devices.cluster import ClusterSpec
from turnout.devices.local_cluster import ENV, LocalCluster, node_resource
from turnout.errors import ClusterSpecError


class _FakeCluster:
    """``ray.cluster_utils.Cluster``: records its head's arguments and every added node; each node
    lists processes as Ray's do (``all_processes``: name -> infos with a ``process`` or None)."""

    fail_on_add = False
    made: list[_FakeCluster] = []

    def __init__(self, initialize_head: bool, head_node_args: dict[str, Any]) -> None:
        _FakeCluster.made.append(self)
        self.initialize_head = initialize_head
        self.head_node_args = head_node_args
        self.added: list[dict[str, Any]] = []
        self.address = "127.0.0.1:6379"
        self.waited = self.shut = 0
        self.nodes = [_node([11, None, 12])]

    def add_node(self, **kw: Any) -> None:
        if _FakeCluster.fail_on_add:
            raise RuntimeError("node failed")
        self.added.append(kw)
        self.nodes.append(_node([20 + len(self.added)]))

    def wait_for_nodes(self) -> None:
        self.waited += 1

    def list_all_nodes(self) -> list[Any]:
        return self.nodes

    def shutdown(self) -> None:
        self.shut += 1


def _node(pids: list[Any]) -> Any:
    infos = [types.SimpleNamespace(process=None if p is None else types.SimpleNamespace(pid=p)) for p in pids]
    return types.SimpleNamespace(all_processes={"raylet": infos[:1], "others": infos[1:]})


@pytest.fixture
def ray(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Stand-ins for ``ray``, ``ray._private.ray_constants`` and ``ray.cluster_utils`` for one test;
    ``ENV`` unset for it (both restored after)."""
    fake = types.ModuleType("ray")
    fake.calls = []  # type: ignore[attr-defined]
    fake.connected = False  # type: ignore[attr-defined]
    fake.is_initialized = lambda: fake.connected  # type: ignore[attr-defined]

    def init(**kw: Any) -> None:
        fake.calls.append(("init", kw))  # type: ignore[attr-defined]
        fake.connected = True  # type: ignore[attr-defined]

    def shutdown() -> None:
        fake.calls.append(("shutdown", {}))  # type: ignore[attr-defined]
        fake.connected = False  # type: ignore[attr-defined]

    fake.init, fake.shutdown = init, shutdown  # type: ignore[attr-defined]
    private, constants, utils = (types.ModuleType(n) for n in ("ray._private", "ray._private.ray_constants",
                                                               "ray.cluster_utils"))
    constants.ENABLE_RAY_CLUSTER = True  # type: ignore[attr-defined]
    private.ray_constants = constants  # type: ignore[attr-defined]
    utils.Cluster = _FakeCluster  # type: ignore[attr-defined]
    for name, mod in (("ray", fake), ("ray._private", private), ("ray._private.ray_constants", constants),
                      ("ray.cluster_utils", utils)):
        monkeypatch.setitem(sys.modules, name, mod)
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.setattr(_FakeCluster, "fail_on_add", False)
    monkeypatch.setattr(_FakeCluster, "made", [])
    fake.constants = constants  # type: ignore[attr-defined]
    return fake


def test_each_node_is_marked_by_its_own_resource() -> None:
    """Node ``i`` carries the custom resource ``turnout_node_<i>``, which a spec names to pin a task."""
    assert [node_resource(i) for i in (0, 1, 12)] == ["turnout_node_0", "turnout_node_1", "turnout_node_12"]


def test_a_local_cluster_needs_a_node_and_says_so() -> None:
    """One node is a cluster; none is refused, naming the count. Its defaults: two nodes of one CPU
    with an 80 MiB object store each. Kills ``__init__`` refusing one node, refusing without words,
    and its defaults changed."""
    with pytest.raises(ClusterSpecError) as e:
        LocalCluster(nodes=0)
    assert str(e.value) == "a local cluster needs at least one node, got 0"
    assert LocalCluster(nodes=1).nodes == 1
    lc = LocalCluster()
    assert (lc.nodes, lc.num_cpus, lc.object_store_memory, lc.cluster) == (2, 1, 80 * 1024 * 1024, None)


def test_start_asks_for_every_node_on_loopback_and_connects_to_it(ray: Any) -> None:
    """A start with three nodes: the head with the CPUs, the object store, node 0's resource and no
    dashboard; two more nodes, each with its own resource; then this process connects to the head's
    address (Ray's logs not copied here) and waits for the nodes. Ray's single-machine mode is chosen
    both in the environment (for the processes it starts) and in the already imported constants.
    Kills every ``start`` mutant that changes, drops or blanks a request."""
    lc = LocalCluster(nodes=3, num_cpus=2, object_store_memory=1000)
    assert lc.start() is lc
    c = lc.cluster
    assert isinstance(c, _FakeCluster) and c.initialize_head is True
    assert c.head_node_args == {"num_cpus": 2, "object_store_memory": 1000, "resources": {"turnout_node_0": 1},
                                "include_dashboard": False}
    assert c.added == [{"num_cpus": 2, "object_store_memory": 1000, "resources": {"turnout_node_1": 1}},
                       {"num_cpus": 2, "object_store_memory": 1000, "resources": {"turnout_node_2": 1}}]
    assert ray.calls == [("init", {"address": "127.0.0.1:6379", "log_to_driver": False})] and c.waited == 1
    assert os.environ[ENV] == "0" and ray.constants.ENABLE_RAY_CLUSTER is False
    assert lc.address == "127.0.0.1:6379"
    lc.stop()


def test_a_one_node_cluster_adds_no_node(ray: Any) -> None:
    """With one node the head is the whole cluster. Kills ``start`` adding nodes from 0."""
    lc = LocalCluster(nodes=1).start()
    assert lc.cluster is not None and lc.cluster.added == []
    lc.stop()


def test_start_refuses_a_process_already_connected_to_ray(ray: Any) -> None:
    """A LocalCluster owns the cluster it stops, so it will not start inside a Ray session it did not
    make: it refuses before starting any node. Kills ``start`` refusing without its words."""
    ray.connected = True
    lc = LocalCluster()
    with pytest.raises(ClusterSpecError) as e:
        lc.start()
    assert str(e.value) == "this process is already connected to Ray; a LocalCluster starts its own"
    assert lc.cluster is None and ray.calls == []


def test_a_start_that_fails_part_way_stops_what_it_started(ray: Any) -> None:
    """A node that fails to start leaves no head running: the error goes up and the head is shut down
    and forgotten, and the environment is as it was. Kills ``start`` recording its cluster too late
    for ``stop`` to find it."""
    _FakeCluster.fail_on_add = True
    lc = LocalCluster(nodes=2)
    with pytest.raises(RuntimeError, match="node failed"):
        lc.start()
    (head,) = _FakeCluster.made
    assert head.shut == 1 and lc.cluster is None and ENV not in os.environ and ray.calls == []


def test_stop_disconnects_shuts_down_and_restores_the_environment(ray: Any) -> None:
    """``stop`` ends this process's Ray session, shuts down the nodes it started, forgets them and
    unsets ``ENV`` if it was unset before the start; a second stop does nothing more. Kills ``stop``
    mutants that keep the cluster or the variable."""
    lc = LocalCluster(nodes=2).start()
    c = lc.cluster
    assert c is not None
    lc.stop()
    assert ray.calls[-1] == ("shutdown", {}) and c.shut == 1 and lc.cluster is None and ENV not in os.environ
    lc.stop()
    assert [name for name, _ in ray.calls] == ["init", "shutdown"] and c.shut == 1


@pytest.mark.parametrize("theirs", ["0", "1"])
def test_stop_gives_back_a_variable_that_was_set_before(ray: Any, monkeypatch: pytest.MonkeyPatch, theirs: str) -> None:
    """A variable the user had set before the start (``start`` sets it to "0") has the user's value
    again after ``stop``, and a second stop leaves it so. Kills ``stop`` popping it whatever it was
    before, or leaving the "0" of the start."""
    monkeypatch.setenv(ENV, theirs)
    lc = LocalCluster(nodes=1).start()
    assert os.environ[ENV] == "0"
    lc.stop()
    assert os.environ.get(ENV) == theirs
    lc.stop()
    assert os.environ.get(ENV) == theirs


def test_stopping_a_cluster_never_started_touches_nothing(ray: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """``stop`` on a cluster that never started (a fixture's cleanup after a failed setup) neither
    ends a Ray session nor removes the user's variable. Kills ``stop`` reading a missing start as a
    variable that was unset before, or failing on it."""
    monkeypatch.setenv(ENV, "1")
    LocalCluster().stop()
    assert os.environ[ENV] == "1" and ray.calls == []


def test_a_context_starts_and_stops(ray: Any) -> None:
    """``with LocalCluster() as lc`` is ``lc.start()`` then ``lc.stop()``."""
    with LocalCluster(nodes=1) as lc:
        assert lc.cluster is not None and ray.connected
    assert lc.cluster is None and not ray.connected


def test_the_address_of_a_cluster_not_started_is_an_error() -> None:
    """There is no address before ``start``."""
    with pytest.raises(AssertionError, match="not started"):
        _ = LocalCluster().address


def test_a_spec_puts_task_i_on_node_i_mod_nodes() -> None:
    """``spec(tasks, devices, job)``: ``tasks`` tasks of ``devices`` CPU devices each, task ``i`` pinned
    to node ``i % nodes`` by a sliver of its resource. Kills ``spec`` mutants of the node, the
    amount, the count and the job."""
    spec = LocalCluster(nodes=2).spec(tasks=3, devices=1, job="w")
    assert isinstance(spec, ClusterSpec)
    assert [(t.name, len(t.devices), dict(t.resources)) for t in spec.tasks] == [
        ("/job:w/task:0", 1, {"turnout_node_0": 0.01}), ("/job:w/task:1", 1, {"turnout_node_1": 0.01}),
        ("/job:w/task:2", 1, {"turnout_node_0": 0.01})]
    default = LocalCluster(nodes=3).spec()
    assert [(t.name, len(t.devices)) for t in default.tasks] == [("/job:worker/task:0", 2), ("/job:worker/task:1", 2)]


def test_pids_are_the_started_processes_and_their_children(ray: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """``pids`` lists, sorted, every process the nodes report (an info without a process skipped) and
    each one's children, skipping a process that has already ended; before a start there are none.
    Kills ``pids`` mutants that drop a root, its children, or the skip."""
    psutil = types.ModuleType("psutil")

    class NoSuchProcess(Exception):
        pass

    children = {11: [101, 102], 12: [], 21: [201]}

    class Process:
        def __init__(self, pid: int) -> None:
            if pid not in children:
                raise NoSuchProcess(pid)
            self.pid = pid

        def children(self, recursive: bool = False) -> list[Any]:
            assert recursive
            return [types.SimpleNamespace(pid=p) for p in children[self.pid]]

    psutil.Process, psutil.NoSuchProcess = Process, NoSuchProcess  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "psutil", psutil)
    assert LocalCluster().pids() == []
    lc = LocalCluster(nodes=3).start()
    assert lc.pids() == [11, 12, 21, 101, 102, 201]  # node 2's process 22 has ended
    lc.stop()


def test_the_module_names_the_variable_it_sets() -> None:
    """``ENV`` is the variable Ray reads for its single-machine mode."""
    assert lc_module.ENV == "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def test_stop_does_not_fail_where_the_variable_it_set_is_gone(ray: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cleanup never fails on what it would undo: where ``ENV`` was unset before the start and
    something removed it since, ``stop`` still ends the cluster and leaves it unset. Kills ``stop``
    popping it without a default (a ``KeyError``)."""
    monkeypatch.delenv(ENV, raising=False)
    lc = LocalCluster(nodes=1).start()
    del os.environ[ENV]
    lc.stop()
    assert ENV not in os.environ and lc.cluster is None
