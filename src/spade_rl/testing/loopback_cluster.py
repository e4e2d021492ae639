"""A Ray cluster of several nodes on this machine's loopback: for tests, benchmarks and trying out.

    with LoopbackCluster(workers=2) as cluster:         # a head and 2 worker nodes, all on 127.0.0.1
        executor = RayExecutor(ExecutorConfig(kind="ray", num_actors=2), SandboxConfig())
        executor.start()                                 # one actor on each worker node
        cluster.kill_node(executor.actors()[0]["node_id"])   # a node dies (its raylet and workers)
        cluster.add_worker()                             # and a new one joins

Each node is a real raylet with its own object store and worker processes, as on a cluster; the
head has no CPUs, so actors land on the worker nodes. Everything binds to 127.0.0.1: Ray would
otherwise advertise (and connect to) the machine's outward address, so this process and the nodes
it starts are told to stay on loopback. Node failures are detected within about 1.5 s (Ray's
default is tens of seconds). The driver joins the cluster on entry and leaves it on exit.
"""

from __future__ import annotations

import logging
import os
import signal

import ray
import ray._private.ray_constants as ray_constants
from ray.cluster_utils import Cluster

log = logging.getLogger(__name__)

# On Linux, Ray replaces a loopback address with the machine's routable one ("a cluster must be
# reachable from other machines"); with this off it keeps 127.0.0.1. The variable is read when Ray
# is imported (children: raylets, workers), the constant at call time (this process). Usage
# statistics, which Ray would otherwise send out, are off; so is the dashboard.
_ENVIRONMENT = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}
FAST_FAILURE_DETECTION = {
    "health_check_initial_delay_ms": 0,
    "health_check_period_ms": 500,
    "health_check_failure_threshold": 3,
}


class LoopbackCluster:
    """A head node without CPUs and ``workers`` nodes of ``cpus_per_node`` CPUs each, on 127.0.0.1."""

    def __init__(self, workers: int = 2, cpus_per_node: int = 1, object_store_mb: int = 80):
        if workers < 1 or cpus_per_node < 1:
            raise ValueError("a loopback cluster needs at least one worker node with at least one CPU")
        if object_store_mb < 75:
            raise ValueError("Ray needs an object store of at least 75 MB per node")
        self.workers = workers
        self.cpus_per_node = cpus_per_node
        self.object_store_bytes = object_store_mb << 20
        self.cluster: Cluster | None = None
        self._saved: tuple[dict[str, str | None], bool] | None = None

    def __enter__(self) -> LoopbackCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    @property
    def address(self) -> str:
        if self.cluster is None:
            raise RuntimeError("the loopback cluster is not running")
        return self.cluster.address

    def start(self) -> None:
        if ray.is_initialized():
            raise RuntimeError("this process is already connected to Ray: leave it (ray.shutdown()) first")
        self._saved = (
            {name: os.environ.get(name) for name in _ENVIRONMENT},
            ray_constants.ENABLE_RAY_CLUSTER,
        )
        os.environ.update(_ENVIRONMENT)
        ray_constants.ENABLE_RAY_CLUSTER = False
        try:
            self.cluster = Cluster(
                initialize_head=True,
                head_node_args={
                    "num_cpus": 0,
                    "object_store_memory": self.object_store_bytes,
                    "node_ip_address": "127.0.0.1",
                    "include_dashboard": False,
                    "_system_config": FAST_FAILURE_DETECTION,
                },
            )
            for _ in range(self.workers):
                self.add_worker()
            ray.init(address=self.cluster.address, log_to_driver=False, logging_level=logging.WARNING)
        except BaseException:
            self.shutdown()
            raise

    def add_worker(self):
        """Start one more worker node; returns Ray's node object (``node_id`` is its id)."""
        if self.cluster is None:
            raise RuntimeError("the loopback cluster is not running")
        return self.cluster.add_node(
            num_cpus=self.cpus_per_node,
            object_store_memory=self.object_store_bytes,
            node_ip_address="127.0.0.1",
        )

    def node_ids(self) -> list[str]:
        """The node ids of the worker nodes alive now."""
        return [node.node_id for node in self.cluster.worker_nodes] if self.cluster else []

    def kill_node(self, node_id: str) -> None:
        """Kill a worker node at once, as a machine that dies would: SIGKILL to its Ray processes and
        to every process under them (its workers, the actors' sandbox workers), all at the same
        moment. The cluster notices within about 1.5 s."""
        if self.cluster is None:
            raise RuntimeError("the loopback cluster is not running")
        for node in list(self.cluster.worker_nodes):
            if node.node_id == node_id:
                roots = {p.process.pid for infos in node.all_processes.values() for p in infos}
                doomed = roots | _descendants(roots)
                # Frozen first, so that none of them sees another die and answers meanwhile (an
                # actor reporting its sandbox workers' deaths, say): a dead machine says nothing.
                for sig in (signal.SIGSTOP, signal.SIGKILL):
                    for pid in doomed:
                        try:
                            os.kill(pid, sig)
                        except ProcessLookupError:
                            pass
                self.cluster.remove_node(node, allow_graceful=False)  # reaps them
                return
        raise ValueError(f"no worker node {node_id!r} in this cluster; its worker nodes: {self.node_ids()}")

    def shutdown(self) -> None:
        if ray.is_initialized():
            ray.shutdown()
        if self.cluster is not None:
            self.cluster.shutdown()
            self.cluster = None
        if self._saved is not None:
            variables, constant = self._saved
            for name, value in variables.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
            ray_constants.ENABLE_RAY_CLUSTER = constant
            self._saved = None


def _descendants(roots: set[int]) -> set[int]:
    """Every process below ``roots`` (children, their children, ...), from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        children.setdefault(int(fields[1]), []).append(int(entry))
    found: set[int] = set()
    todo = list(roots)
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found
