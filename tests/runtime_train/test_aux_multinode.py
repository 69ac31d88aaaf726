"""Two Ray nodes on this machine (`ray.cluster_utils.Cluster`, real raylets): SPREAD placement,
one proxy per node that hosts workers, weights equal to each proxy's worker count, and
weighted round-robin reaching every worker."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
import ray
from ray.cluster_utils import Cluster

from runtime.aux.client import AuxClient
from runtime.aux.config import AuxConfig, ServiceConfig
from runtime.aux.coordinator import AuxCoordinator
from runtime.planner import NodeCapacity, PlanInput, ServiceDemand, WorkerRequest, plan_capacity
from testing.ray import private_ray

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def two_nodes() -> Iterator[Cluster]:
    # A Cluster writes its address to /tmp/ray/ray_current_cluster (ray.cluster_utils), where
    # every plain ray.init() on the machine would find it: other test processes' and `gkr run
    # --local`'s. This test connects by address, so the cluster stays private.
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ray._private.utils, "write_ray_address", lambda *args, **kwargs: None)
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
    cluster.add_node(num_cpus=2)
    cluster.wait_for_nodes()
    with private_ray(address=cluster.address, logging_level=logging.WARNING):
        yield cluster
    cluster.shutdown()


def test_spread_workers_get_a_proxy_per_node(two_nodes: Cluster) -> None:
    service = ServiceConfig(impl="echo", cpus_per_worker=0.5, min_replicas=3)
    nodes = (NodeCapacity(0, 2), NodeCapacity(0, 2))
    demand = ServiceDemand("who", WorkerRequest(0, 0.5), ratio=1, min_replicas=3)
    plan = plan_capacity(PlanInput(nodes, WorkerRequest(0, 1), (demand,), max_world_size=1))
    coordinator = AuxCoordinator("spread", AuxConfig(services={"who": service}), plan)
    try:
        handle = coordinator.start()["who"]
        assert sorted(e.weight for e in handle.endpoints) == [1, 2]  # SPREAD over two nodes
        client = AuxClient(handle, rank=0)
        # A worker counts as ready once its announcement came through its link to the proxy,
        # so every link is up: three calls, dealt 1:2 over the proxies and round-robin behind
        # each, reach all three workers.
        pids = {client.call("where")["pid"] for _ in range(3)}
        assert len(pids) == 3  # every worker on every node is reached
    finally:
        coordinator.shutdown()
