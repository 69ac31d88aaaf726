"""Auto-shrink's Warden path: the request the fault-tolerance controller builds for a dropped
group goes through Warden's public API to a real Temporal dev server and a real Warden
worker, which patches the RayCluster (in the Kubernetes API double) once per request."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime.ft.config import FaultToleranceConfig
from runtime.ft.shrink import Drop, WardenShrink, shrink_request, shrink_target
from runtime.identity import Identity
from runtime.warden.config import WardenConfig
from tests.warden.conftest import RunningWorker, fast_config

pytestmark = pytest.mark.slow


@pytest.fixture
def warden(loop, temporal, doubles, tmp_path: Path) -> Iterator[WardenConfig]:
    config = fast_config(temporal, doubles, tmp_path)
    worker = RunningWorker(loop, temporal, config, sweeps=False)
    yield config
    worker.stop()


def test_a_dropped_group_shrinks_the_raycluster_once_through_wardens_public_api(
    warden: WardenConfig, doubles
) -> None:
    api, _, _ = doubles
    api.put({
        "apiVersion": "ray.io/v1", "kind": "RayCluster",
        "metadata": {"name": "pretrain", "namespace": "team-a", "resourceVersion": "3"},
        "spec": {"workerGroupSpecs": [
            {"groupName": "workers", "replicas": 6, "minReplicas": 6, "maxReplicas": 6}]},
    })
    ft = FaultToleranceConfig(enabled=True, replica_groups=3,
                              warden_address=warden.temporal.address,
                              warden_task_queue=warden.temporal.task_queue)
    target = shrink_target(ft, board=None)
    assert isinstance(target, WardenShrink)
    pods = {0: {"pretrain-w-0", "pretrain-w-1"}, 1: {"pretrain-w-2", "pretrain-w-3"},
            2: {"pretrain-w-4", "pretrain-w-5"}}
    who = Identity(namespace="team-a", job="pretrain")
    request = shrink_request("pretrain-1a2b3c", Drop(group=1, quorum=4, step=120), pods, ft, who)

    first, again = target.request(request), target.request(request)
    assert (first.applied, first.replicas) == (True, 4)
    assert (again.applied, again.replicas) == (False, 4)
    group = api.get("ray.io", "rayclusters", "team-a", "pretrain")["spec"]["workerGroupSpecs"][0]
    assert group["replicas"] == 4
    assert group["scaleStrategy"] == {"workersToDelete": ["pretrain-w-2", "pretrain-w-3"]}
