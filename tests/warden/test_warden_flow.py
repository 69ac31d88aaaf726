"""Warden end to end against a real Temporal dev server and HTTP doubles of the cluster.

The Kubernetes API, Prometheus over DCGM exporters and Compute Engine cannot run here; they
are HTTP doubles (tests/doubles/kube_apiserver.py, warden_doubles.py) that Warden's real
clients talk to.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from temporalio.client import WorkflowExecutionStatus

from runtime.warden import memory
from runtime.warden.model import Incident, ShrinkRequest, Trigger, node_workflow_id
from runtime.warden.triggers import request_shrink, trigger_node
from tests.warden.conftest import RunningWorker, fast_config
from tests.warden.warden_doubles import gpu_node, running_pod

pytestmark = pytest.mark.slow


def wait_for(what: str, predicate: Callable[[], Any], timeout: float = 60.0) -> Any:
    """Poll until the predicate holds; fail naming what never happened."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    pytest.fail(f"timed out waiting for: {what}")


def result(loop, temporal, node: str) -> Incident:
    """The node workflow's result, once detection has started it."""
    query = f'WorkflowId = "{node_workflow_id(node)}"'
    wait_for(f"a workflow for {node}",
             lambda: loop.run(_collect(temporal.client.list_workflows(query))))
    handle = temporal.client.get_workflow_handle(node_workflow_id(node), result_type=Incident)
    return loop.run(handle.result())


def node_of(kube, name: str) -> dict:
    return kube.get("", "nodes", "", name)


def notes(kube, node: str) -> dict[str, str]:
    return node_of(kube, node)["metadata"].get("annotations", {})


def patches(kube, node: str) -> list:
    """The PATCH requests Warden sent for a node, oldest first."""
    return kube.requests_to("PATCH", f"/api/v1/nodes/{node}")


@pytest.fixture
def warden(loop, temporal, doubles, tmp_path):
    config = fast_config(temporal, doubles, tmp_path)
    worker = RunningWorker(loop, temporal, config)
    yield config
    worker.stop()


def test_definite_fault_cordons_with_memory_and_recovers(loop, temporal, doubles, warden):
    kube, prom, gcp = doubles
    kube.put(gpu_node("gpu-a"))
    kube.put(gpu_node("gpu-noisy"))
    for gpu in range(8):  # noise below every threshold on the other node
        prom.set("DCGM_FI_DEV_GPU_TEMP", "gpu-noisy", gpu, 85)
        prom.set("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "gpu-noisy", gpu, 99)
    prom.set("DCGM_FI_DEV_XID_ERRORS", "gpu-noisy", 3, 13)  # an application Xid
    wait_for("a detection sweep", lambda: len(prom.calls) >= 20)

    injected = time.time()
    prom.set("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "gpu-a", 5, 1)
    cordon = wait_for("the cordon", lambda: [
        c for c in patches(kube, "gpu-a") if (c.body.get("spec") or {}).get("unschedulable")])
    latency = cordon[0].at - injected
    print(f"\ndetection-to-cordon latency: {latency:.3f} s (sweep interval 0.5 s)")

    first = cordon[0].body["metadata"]["annotations"]
    assert first[memory.RECENT] == "1"
    assert first[memory.OWNED] == "warden"
    assert "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL=1" in first[memory.REASON]

    prom.set("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "gpu-a", 5, 0)  # the reset clears the counter
    incident = result(loop, temporal, "gpu-a")
    assert incident.phase == "healthy"
    assert gcp.executions("reset") == ["gpu-a"]
    assert not node_of(kube, "gpu-a")["spec"].get("unschedulable")
    assert notes(kube, "gpu-a")[memory.RECENT] == "1"  # the memory outlives the incident
    assert patches(kube, "gpu-noisy") == []


def test_ambiguous_fault_runs_the_check_and_decides(loop, temporal, doubles, check_jobs,
                                                     warden):
    kube, prom, _ = doubles
    check_jobs.plan = lambda node, argv: (
        (node != "gpu-bad" or argv[0] == "dcgmi"),
        '{"findings": ["nccl all-reduce bandwidth 12 GB/s < 300"]}', 0.0)
    kube.put(gpu_node("gpu-bad"))
    kube.put(gpu_node("gpu-fine"))
    prom.set("DCGM_FI_DEV_XID_ERRORS", "gpu-bad", 0, 74)
    prom.set("DCGM_FI_DEV_XID_ERRORS", "gpu-fine", 1, 74)

    cleared = result(loop, temporal, "gpu-fine")
    assert cleared.phase == "cleared"
    assert patches(kube, "gpu-fine") == []

    wait_for("the cordon", lambda: node_of(kube, "gpu-bad")["spec"].get("unschedulable"))
    assert "nccl all-reduce" in notes(kube, "gpu-bad")[memory.REASON]
    prom.set("DCGM_FI_DEV_XID_ERRORS", "gpu-bad", 0, 0)
    prom.set("DCGM_FI_DEV_XID_ERRORS", "gpu-fine", 1, 0)
    assert result(loop, temporal, "gpu-bad").phase == "healthy"


def test_two_triggers_for_one_node_share_one_workflow(loop, temporal, doubles, tmp_path):
    kube, _, _ = doubles
    kube.put(gpu_node("gpu-twice"))
    # A RayCluster pod holds the recovery.
    kube.put(running_pod("team-a", "trainer-0", "gpu-twice", owner="RayCluster"))
    config = fast_config(temporal, doubles, tmp_path)
    fault = Trigger("fault", "Xid 79", "test")
    first = loop.run(trigger_node(temporal.client, config, "gpu-twice", fault))
    second = loop.run(trigger_node(temporal.client, config, "gpu-twice", fault))
    assert first.result_run_id == second.result_run_id
    worker = RunningWorker(loop, temporal, config, sweeps=False)
    try:
        incident = result(loop, temporal, "gpu-twice")
    finally:
        worker.stop()
    assert incident.phase == "waiting-for-workloads"
    assert any("joined by fault" in step.what for step in incident.steps)
    query = f'WorkflowId = "{node_workflow_id("gpu-twice")}"'
    runs = loop.run(_collect(temporal.client.list_workflows(query)))
    assert len(runs) == 1
    assert len([c for c in patches(kube, "gpu-twice") if c.body.get("spec")]) == 1


async def _collect(iterator) -> list:
    return [item async for item in iterator]


def test_repeated_cordons_escalate_to_cloud_repair(loop, temporal, doubles, warden):
    kube, _, gcp = doubles
    now = time.time()
    old = now - 30 * 86400  # outside the 7-day window: forgotten
    history = ",".join(f"{t:.0f}" for t in (old, now - 3600, now - 60))
    kube.put(gpu_node("gpu-repeat", **{memory.CORDONS: history}))
    loop.run(trigger_node(temporal.client, warden, "gpu-repeat",
                          Trigger("fault", "Xid 48", "test")))
    incident = result(loop, temporal, "gpu-repeat")
    assert incident.escalated and incident.recent_cordons == 3
    assert gcp.executions("reportHostAsFaulty") == ["gpu-repeat"]
    assert gcp.executions("reset") == []
    assert incident.phase == "healthy"


def test_drain_notifies_waits_then_evicts_only_preemptible_jobs(loop, temporal, doubles, warden):
    kube, _, gcp = doubles
    kube.put(gpu_node("gpu-drain"))
    kube.put(running_pod("team-b", "sweep-7", "gpu-drain", owner="Job",
                         priority="gkr-preemptible"))
    kube.put(running_pod("kube-system", "nvidia-driver", "gpu-drain", owner="DaemonSet"))
    kube.put(gpu_node("gpu-busy"))
    kube.put(running_pod("team-a", "ray-worker-3", "gpu-busy", owner="RayCluster"))
    for node in ("gpu-drain", "gpu-busy"):
        loop.run(trigger_node(temporal.client, warden, node, Trigger("fault", "Xid 79", "t")))

    assert result(loop, temporal, "gpu-drain").phase == "healthy"
    event = next(e for e in kube.objects("", "events") if e["reason"] == "WardenDrainScheduled")
    assert event["involvedObject"]["name"] == "sweep-7"
    evicted = next(c for c in kube.requests if c.path.endswith("/eviction"))
    notified = next(c for c in kube.requests if c.path.endswith("/events") and c.method == "POST")
    assert evicted.at - notified.at >= 1.0  # the grace period
    assert kube.get("", "pods", "kube-system", "nvidia-driver") is not None

    assert result(loop, temporal, "gpu-busy").phase == "waiting-for-workloads"
    assert "gpu-busy" not in gcp.executions("reset")
    kube.delete("", "pods", "team-a", "ray-worker-3")  # the job ends; the recovery sweep resumes
    wait_for("reboot after the job ended", lambda: "gpu-busy" in gcp.executions("reset"))
    wait_for("uncordon", lambda: not node_of(kube, "gpu-busy")["spec"].get("unschedulable"))


def test_shrink_is_idempotent_per_request_id(loop, temporal, doubles, warden):
    kube, _, _ = doubles
    kube.put({
        "apiVersion": "ray.io/v1", "kind": "RayCluster",
        "metadata": {"name": "run-1", "namespace": "team-a", "resourceVersion": "7"},
        "spec": {"workerGroupSpecs": [
            {"groupName": "gpu", "replicas": 16, "minReplicas": 16, "maxReplicas": 16}]},
    })
    request = ShrinkRequest("ft-42", "team-a", "run-1", "gpu", 2, ["run-1-gpu-worker-x"])
    first = loop.run(request_shrink(temporal.client, warden, request))
    again = loop.run(request_shrink(temporal.client, warden, request))
    group = kube.get("ray.io", "rayclusters", "team-a", "run-1")["spec"]["workerGroupSpecs"][0]
    assert (first.applied, first.replicas) == (True, 14)
    assert (again.applied, again.replicas) == (False, 14)
    assert group["replicas"] == 14 and group["minReplicas"] == 14
    assert group["scaleStrategy"] == {"workersToDelete": ["run-1-gpu-worker-x"]}


def test_sweeps_keep_running(loop, temporal, warden):
    queue = warden.temporal.task_queue
    handle = temporal.client.get_workflow_handle(f"warden-detect-{queue}")
    description = loop.run(handle.describe())
    assert description.status == WorkflowExecutionStatus.RUNNING
