"""Warden end to end against a real Temporal dev server and HTTP doubles of the cluster.

The Kubernetes API, Prometheus over DCGM exporters and Compute Engine cannot run here; they
are HTTP doubles (testing/doubles/kube_apiserver.py, testing/warden.py) that Warden's real
clients talk to.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import pytest
from temporalio.client import WorkflowExecutionStatus

from runtime.identity import Env, Warden
from runtime.warden import memory
from runtime.warden.model import Incident, ShrinkRequest, Trigger, node_workflow_id
from runtime.warden.reservations import parse_stamp, stamp
from runtime.warden.triggers import request_shrink, trigger_node
from testing.wait import wait_until
from testing.warden import (
    ChatWebhook,
    KubeRay,
    RecordedEvents,
    gpu_node,
    is_stress,
    ray_pod,
    raycluster,
    rayjob,
    running_pod,
)
from tests.warden.conftest import RunningWorker, fast_config

pytestmark = pytest.mark.slow


def wait_for(what: str, predicate: Callable[[], Any], timeout: float = 60.0) -> Any:
    """Poll until the predicate holds (its value); fail naming what never happened."""
    return wait_until(predicate, timeout, what)


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
        (node != "gpu-bad" or is_stress(argv)),
        '{"findings": ["nccl all-reduce bandwidth 12 GB/s < 300"]}', 0.0)
    kube.put(gpu_node("gpu-bad"))
    kube.put(gpu_node("gpu-fine"))
    prom.set("DCGM_FI_DEV_XID_ERRORS", "gpu-bad", 0, 74)
    prom.set("DCGM_FI_DEV_XID_ERRORS", "gpu-fine", 1, 74)

    cleared = result(loop, temporal, "gpu-fine")
    assert cleared.phase == "cleared"
    assert not [c for c in patches(kube, "gpu-fine") if c.body.get("spec")]  # never cordoned

    wait_for("the cordon", lambda: node_of(kube, "gpu-bad")["spec"].get("unschedulable"))
    assert "nccl all-reduce" in notes(kube, "gpu-bad")[memory.REASON]
    prom.set("DCGM_FI_DEV_XID_ERRORS", "gpu-bad", 0, 0)
    prom.set("DCGM_FI_DEV_XID_ERRORS", "gpu-fine", 1, 0)
    assert result(loop, temporal, "gpu-bad").phase == "healthy"


XID, DBE = "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"
PASS = '{"findings": []}'


def preflights(kube, node: str) -> list[dict]:
    """The preflight check Jobs Warden created for a node (not its stress tests)."""
    return [job for job in kube.objects("batch", "jobs")
            if job["spec"]["template"]["spec"]["nodeSelector"]["kubernetes.io/hostname"] == node
            and not is_stress(job["spec"]["template"]["spec"]["containers"][0]["command"])]


def runs(loop, temporal, node: str) -> int:
    query = f'WorkflowId = "{node_workflow_id(node)}"'
    return len(loop.run(_collect(temporal.client.list_workflows(query))))


def sweeps(prom, config, count: int) -> None:
    """Wait until `count` more detection sweeps have queried Prometheus."""
    queries = 1 + len(config.detection.metrics)  # the Xid gauge and each metric rule
    target = len(prom.calls) + count * queries
    wait_for(f"{count} detection sweeps", lambda: len(prom.calls) >= target)


def test_cleared_suspect_is_held_off_until_its_signals_change(loop, temporal, doubles,
                                                              check_jobs, tmp_path):
    kube, prom, _ = doubles
    check_jobs.plan = lambda node, argv: (True, PASS, 0.0)
    config = fast_config(temporal, doubles, tmp_path)
    events = RecordedEvents()
    worker = RunningWorker(loop, temporal, config, events=events)
    try:
        kube.put(gpu_node("gpu-held"))
        prom.set(XID, "gpu-held", 2, 74)  # the last-Xid gauge keeps 74 after the check
        assert result(loop, temporal, "gpu-held").phase == "cleared"
        held = notes(kube, "gpu-held")
        assert held[memory.CLEARED] == "Xid 74"
        hold_off = config.detection.cleared_holdoff_s
        assert parse_stamp(held[memory.CLEARED_UNTIL]) > time.time() + hold_off - 3600
        assert [(n, a) for n, a, _, message in events.rows if "held off until" in message] \
            == [("gpu-held", "cleared")]

        sweeps(prom, config, 2)  # past a sweep that read the node before the hold-off
        before = runs(loop, temporal, "gpu-held")
        sweeps(prom, config, 3)
        assert runs(loop, temporal, "gpu-held") == before  # no workflow, no check Job
        assert len(preflights(kube, "gpu-held")) == 1

        prom.set(XID, "gpu-held", 3, 94)  # another ambiguous Xid: checked at once
        wait_for("a check of the new signal", lambda: len(preflights(kube, "gpu-held")) == 2)
        wait_for("the new hold-off", lambda: notes(kube, "gpu-held")[memory.CLEARED] == "Xid 94")

        prom.set(DBE, "gpu-held", 3, 1)  # definite: never held off
        wait_for("the cordon", lambda: node_of(kube, "gpu-held")["spec"].get("unschedulable"))
        assert "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL=1" in notes(kube, "gpu-held")[memory.REASON]
        assert memory.CLEARED not in notes(kube, "gpu-held")  # a cordon forgets the hold-off
    finally:
        worker.stop()


def test_a_suspect_held_off_since_its_trigger_runs_no_check(loop, temporal, doubles, warden):
    kube, _, _ = doubles  # as when a sweep read the node just before a check cleared it
    until = stamp(time.time() + 3600)
    kube.put(gpu_node("gpu-raced", **{memory.CLEARED: "Xid 74", memory.CLEARED_UNTIL: until}))
    suspect = Trigger("suspect", "Xid 74", "detection", ("Xid 74",))
    loop.run(trigger_node(temporal.client, warden, "gpu-raced", suspect))
    incident = result(loop, temporal, "gpu-raced")
    assert incident.phase == "held-off" and preflights(kube, "gpu-raced") == []
    assert any(f"held off until {until}" in step.what for step in incident.steps)


def test_a_definite_fault_stops_a_running_check(loop, temporal, doubles, check_jobs, warden):
    kube, prom, gcp = doubles
    # The preflight would run past the test; the stress test after the reboot passes.
    check_jobs.plan = lambda node, argv: (True, PASS, 0.0 if is_stress(argv) else 3600.0)
    gcp.after_reset = lambda node: [prom.set(metric, node, 0, 0) for metric in (XID, DBE)]
    kube.put(gpu_node("gpu-slow"))
    prom.set(XID, "gpu-slow", 0, 74)
    wait_for("the check", lambda: preflights(kube, "gpu-slow"))
    prom.set(DBE, "gpu-slow", 0, 1)
    incident = result(loop, temporal, "gpu-slow")
    assert incident.phase == "healthy"
    assert "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL=1" in notes(kube, "gpu-slow")[memory.REASON]
    assert any("preflight stopped: a definite fault joined" in s.what for s in incident.steps)


SDK_DEFAULT_SLOTS = 100  # temporalio's activity slots per worker when it is given no number


def test_a_cordon_never_queues_behind_waits(loop, temporal, doubles, check_jobs, tmp_path):
    kube, _, _ = doubles
    check_jobs.plan = lambda node, argv: (True, PASS, 3600.0)  # checks outlast the test
    config = fast_config(temporal, doubles, tmp_path, heartbeat_s=30,
                         recovery={"poll_s": 2}, checks={"preflight": {"timeout_s": 3600}})
    suspects = [f"gpu-wait-{n}" for n in range(SDK_DEFAULT_SLOTS)]
    for node in [*suspects, "gpu-next"]:
        kube.put(gpu_node(node))
    worker = RunningWorker(loop, temporal, config, sweeps=False)
    handles = []
    try:
        suspect = Trigger("suspect", "Xid 74", "test")
        handles = loop.run(_together(*(trigger_node(temporal.client, config, node, suspect)
                                       for node in suspects)))
        wait_for("a check waiting on every suspect",
                 lambda: len(kube.objects("batch", "jobs")) == len(suspects))
        fault = Trigger("fault", "Xid 79", "test")
        handles.append(loop.run(trigger_node(temporal.client, config, "gpu-next", fault)))
        wait_for("the cordon", lambda: node_of(kube, "gpu-next")["spec"].get("unschedulable"))
    finally:
        worker.stop()
        loop.run(_together(*(handle.terminate() for handle in handles)))


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


async def _together(*awaitables) -> list:
    return list(await asyncio.gather(*awaitables))


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


SLOW_NCCL = '{"findings": ["nccl all-reduce bandwidth 12 GB/s < 300"]}'


def test_a_single_node_rayjob_is_noticed_then_evicted_while_a_gang_blocks(
        loop, temporal, doubles, check_jobs, tmp_path, monkeypatch):
    kube, _, gcp = doubles
    check_jobs.plan = lambda node, argv: (is_stress(argv), SLOW_NCCL, 0.0)  # preflight fails
    hook = ChatWebhook()
    monkeypatch.setenv(Env.WARDEN_WEBHOOK, hook.url + "/services/T0/B0/s3cr3t")
    kuberay = KubeRay(kube)
    kube.put(gpu_node("gpu-tune"))
    kube.put(rayjob("team-c", "tune", owner="ada@example.com"))
    kube.put(raycluster("team-c", "tune-rc", workers=1, rayjob="tune"))
    kube.put(ray_pod("team-c", "tune-rc-workers-a1", "gpu-tune", "tune-rc",
                     priority="gkr-preemptible", owner="ada@example.com"))
    kube.put(gpu_node("gpu-gang"))
    kube.put(raycluster("team-a", "pretrain", workers=4))
    kube.put(ray_pod("team-a", "pretrain-workers-b2", "gpu-gang", "pretrain",
                     priority="gkr-preemptible"))
    config = fast_config(temporal, doubles, tmp_path)
    worker = RunningWorker(loop, temporal, config)
    try:
        suspect = Trigger("suspect", "Xid 74", "test", ("Xid 74",))
        for node in ("gpu-tune", "gpu-gang"):
            loop.run(trigger_node(temporal.client, config, node, suspect))
        assert result(loop, temporal, "gpu-tune").phase == "healthy"
        gang = result(loop, temporal, "gpu-gang")
    finally:
        worker.stop()
        hook.close()

    notified = next(r for r in kube.requests
                    if r.method == "POST" and r.path == "/api/v1/namespaces/team-c/events")
    evicted = kube.requests_to(
        "POST", "/api/v1/namespaces/team-c/pods/tune-rc-workers-a1/eviction")
    assert evicted and evicted[0].at - notified.at >= 1.0  # after the grace period
    assert kuberay.replaced == ["team-c/tune-rc-workers-a1"]  # KubeRay made it anew, elsewhere
    assert "gpu-tune" in gcp.executions("reset")

    note = json.loads(kube.get("ray.io", "rayjobs", "team-c", "tune")["metadata"][
        "annotations"][Warden.DRAIN])
    assert note["node"] == "gpu-tune" and note["pods"] == ["team-c/tune-rc-workers-a1"]
    assert "nccl all-reduce bandwidth 12 GB/s < 300" in note["reason"]
    deadline = parse_stamp(note["deadline"])  # notice time + grace, to the second
    assert deadline is not None and notified.at - 1.0 < deadline <= evicted[0].at
    [event] = kube.objects("", "events", "team-c")
    assert (event["reason"], event["involvedObject"]["name"]) == (
        "WardenDrainScheduled", "tune-rc-workers-a1")
    assert f"evicted at {note['deadline']}" in event["message"]
    [(path, content_type, body)] = hook.posts
    assert path == "/services/T0/B0/s3cr3t" and content_type == "application/json"
    assert list(body) == ["text"]
    for part in ("Warden drains node gpu-tune", "12 GB/s &lt; 300", note["deadline"],
                 "- RayJob team-c/tune (owner ada@example.com): team-c/tune-rc-workers-a1"):
        assert part in body["text"]

    assert gang.phase == "waiting-for-workloads"  # the multi-node RayCluster's pod blocks
    assert kube.get("", "pods", "team-a", "pretrain-workers-b2") is not None
    assert not [r for r in kube.requests if r.method == "POST" and "/team-a/" in r.path]
    assert Warden.DRAIN not in (kube.get("ray.io", "rayclusters", "team-a", "pretrain")[
        "metadata"].get("annotations") or {})
    assert "gpu-gang" not in gcp.executions("reset")


def test_a_webhook_answering_500_does_not_stop_the_drain(loop, temporal, doubles, tmp_path,
                                                         monkeypatch):
    kube, _, gcp = doubles
    hook = ChatWebhook(status=500)
    monkeypatch.setenv(Env.WARDEN_WEBHOOK, hook.url + "/services/T0/B0/s3cr3t")
    kube.put(gpu_node("gpu-hook"))
    kube.put(raycluster("team-d", "solo", workers=0))  # head only, made directly
    kube.put(ray_pod("team-d", "solo-head-x", "gpu-hook", "solo", "head", "gkr-preemptible"))
    config = fast_config(temporal, doubles, tmp_path)
    worker = RunningWorker(loop, temporal, config, sweeps=False)
    try:
        loop.run(trigger_node(temporal.client, config, "gpu-hook",
                              Trigger("fault", "Xid 79", "test")))
        assert result(loop, temporal, "gpu-hook").phase == "healthy"
    finally:
        worker.stop()
        hook.close()
    assert len(hook.posts) == 1  # tried once; its failure was logged, not retried
    assert kube.get("", "pods", "team-d", "solo-head-x") is None
    assert Warden.DRAIN in kube.get("ray.io", "rayclusters", "team-d", "solo")["metadata"][
        "annotations"]
    assert "gpu-hook" in gcp.executions("reset")


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


def test_planted_cordon_stamps_do_not_escalate_a_first_cordon(loop, temporal, doubles, warden):
    kube, _, gcp = doubles
    far = f"{time.time() + 365 * 86400:.0f}"  # a year ahead: never written at a cordon
    kube.put(gpu_node("gpu-planted", **{memory.CORDONS: f"inf,1e300,nan,-5,{far},{far}"}))
    loop.run(trigger_node(temporal.client, warden, "gpu-planted",
                          Trigger("fault", "Xid 48", "test")))
    incident = result(loop, temporal, "gpu-planted")
    assert not incident.escalated and incident.recent_cordons == 1
    assert gcp.executions("reportHostAsFaulty") == []
    assert "," not in notes(kube, "gpu-planted")[memory.CORDONS]  # only the genuine one kept


def test_a_year_3000_hold_off_does_not_stop_the_check(loop, temporal, doubles, check_jobs,
                                                       warden):
    kube, prom, _ = doubles
    check_jobs.plan = lambda node, argv: (True, PASS, 0.0)
    kube.put(gpu_node("gpu-forever", **{memory.CLEARED: "Xid 74",
                                        memory.CLEARED_UNTIL: "3000-01-01T00:00:00Z"}))
    prom.set(XID, "gpu-forever", 2, 74)
    assert result(loop, temporal, "gpu-forever").phase == "cleared"
    assert len(preflights(kube, "gpu-forever")) == 1
    until = parse_stamp(notes(kube, "gpu-forever")[memory.CLEARED_UNTIL])
    assert until is not None and until <= time.time() + warden.detection.cleared_holdoff_s
