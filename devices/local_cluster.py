"""A Ray cluster of N nodes on this machine, bound to 127.0.0.1 only: for tests, demos and a laptop.

Why not ``ray start --node-ip-address=127.0.0.1``: Ray rewrites that address to the machine's network
interface and then listens on every interface, so a "local" test cluster would be reachable from the
network. What keeps every socket on loopback is Ray's single-machine mode, chosen by the environment
variable ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` (read when Ray is imported, and inherited by every Ray
process this one starts), together with ``ray.cluster_utils.Cluster``, which starts the head and the
extra nodes as child processes of this one. The tests check every listening socket of the cluster's
processes.

Each node gets one custom resource, ``turnout_node_<i>`` (amount 1), so a cluster spec can pin a task
to node ``i`` with ``"resources": {"turnout_node_<i>": 0.01}``; ``spec(...)`` writes such a spec.
``stop()`` shuts down exactly the processes this helper started.

To run the same program on an existing multi-machine cluster instead, call
``ray.init(address="<head>:<port>")`` and pass a spec whose ``resources`` name that cluster's nodes.
"""

from __future__ import annotations

import os
from typing import Any, Optional

from turnout.devices.cluster import ClusterSpec
from turnout.errors import ClusterSpecError

ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def node_resource(i: int) -> str:
    """The custom resource that marks node ``i`` of a local cluster."""
    return f"turnout_node_{i}"


class LocalCluster:
    """``with LocalCluster(nodes=2) as lc: sess = tn.Session(g, cluster=lc.spec(...))``.

    Starts ``nodes`` Ray nodes (``num_cpus`` each) on 127.0.0.1 and connects this process to them.
    Refuses to start if this process is already connected to Ray (it would not own that cluster)."""

    def __init__(self, nodes: int = 2, num_cpus: int = 1, object_store_memory: int = 80 * 1024 * 1024) -> None:
        if nodes < 1:
            raise ClusterSpecError(f"a local cluster needs at least one node, got {nodes}")
        self.nodes = nodes
        self.num_cpus = num_cpus
        self.object_store_memory = object_store_memory
        self.cluster: Optional[Any] = None

    def start(self) -> LocalCluster:
        """Start the nodes and ``ray.init`` this process on them (6-8 s on a small machine)."""
        self._env_before = os.environ.get(ENV)
        os.environ[ENV] = "0"
        import ray
        from ray._private import ray_constants
        from ray.cluster_utils import Cluster

        if ray.is_initialized():
            raise ClusterSpecError("this process is already connected to Ray; a LocalCluster starts its own")
        # ray read the variable at import; if it was imported before, make this process agree with its children
        ray_constants.ENABLE_RAY_CLUSTER = False
        common: dict[str, Any] = {"num_cpus": self.num_cpus, "object_store_memory": self.object_store_memory}
        cluster = Cluster(initialize_head=True, head_node_args={
            **common, "resources": {node_resource(0): 1}, "include_dashboard": False})
        self.cluster = cluster
        try:
            for i in range(1, self.nodes):
                cluster.add_node(**common, resources={node_resource(i): 1})
            ray.init(address=cluster.address, log_to_driver=False)
            cluster.wait_for_nodes()
        except BaseException:
            self.stop()
            raise
        return self

    @property
    def address(self) -> str:
        """The GCS address of the head node (``127.0.0.1:port``)."""
        assert self.cluster is not None, "the cluster is not started"
        return str(self.cluster.address)

    def spec(self, tasks: int = 2, devices: int = 2, job: str = "worker") -> ClusterSpec:
        """A spec of ``tasks`` tasks with ``devices`` CPU devices each, task ``i`` on node ``i % nodes``."""
        return ClusterSpec({job: [{"devices": devices, "resources": {node_resource(i % self.nodes): 0.01}}
                                  for i in range(tasks)]})

    def pids(self) -> list[int]:
        """The process ids of the Ray processes this cluster started (raylets, GCS, their children)."""
        import psutil

        roots: list[int] = []
        if self.cluster is not None:
            for node in self.cluster.list_all_nodes():
                for infos in node.all_processes.values():
                    roots += [info.process.pid for info in infos if info.process is not None]
        out: set[int] = set()
        for pid in roots:
            try:
                proc = psutil.Process(pid)
                out.add(pid)
                out.update(c.pid for c in proc.children(recursive=True))
            except psutil.NoSuchProcess:
                pass
        return sorted(out)

    def stop(self) -> None:
        """Disconnect and shut down every node this helper started, and give ``ENV`` back the value it
        had before ``start`` (idempotent)."""
        import ray

        if ray.is_initialized():
            ray.shutdown()
        if self.cluster is not None:
            self.cluster.shutdown()
            self.cluster = None
        if hasattr(self, "_env_before"):  # (a cluster never started changed nothing)
            before = self._env_before
            del self._env_before
            if before is None:
                os.environ.pop(ENV, None)
            else:
                os.environ[ENV] = before  # (the user's own value, which ``start`` set to "0")

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
