"""Events: Kubernetes events (from the API test double, through the real Kubernetes layer)
and Warden's actions (its real activities on that double and on the Compute Engine double),
as `events` rows in a real chDB store."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from temporalio.testing import ActivityEnvironment

from runtime.identity import Env, Label
from runtime.kube import Kube
from runtime.telemetry import events
from runtime.telemetry.store import Store
from runtime.warden.activities import Seams, WardenActivities
from runtime.warden.cluster import KubeCluster
from runtime.warden.config import parse_config
from runtime.warden.gce import GceRepair
from runtime.warden.model import PowerRequest
from testing.doubles.kube_apiserver import KubeApiServer
from testing.warden import FakeGcp, gpu_node

NS = "team-llm"


def _pod() -> dict[str, Any]:
    """A worker pod as `gkr render` makes one: GKR labels, GKR_* env, downward-API values."""
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "pretrain-7b-worker-0", "namespace": NS, "labels": {
            Label.JOB: "pretrain-7b", Label.KIND: "rayjob", Label.TEAM: "llm",
            Label.ROLE: "worker"}},
        "spec": {"nodeName": "gke-a3-7", "containers": [{"name": "ray-worker", "image": "i",
                 "env": [{"name": Env.CLUSTER, "value": "usc1-prod"},
                         {"name": Env.RUN, "value": "pretrain-7b-0412"},
                         {"name": Env.POD, "valueFrom": {
                             "fieldRef": {"fieldPath": "metadata.name"}}}]}]},
    }


# core/v1 Events as their reporters write them: the kubelet (source, first/lastTimestamp,
# count), the node controller, and an events.k8s.io client (eventTime, series,
# reportingComponent; no source or timestamps).
KUBELET = {"apiVersion": "v1", "kind": "Event",
           "metadata": {"name": "pretrain-7b-worker-0.17a", "namespace": NS},
           "involvedObject": {"kind": "Pod", "namespace": NS, "name": "pretrain-7b-worker-0",
                              "fieldPath": "spec.containers{ray-worker}"},
           "reason": "BackOff", "message": "Back-off restarting failed container ray-worker",
           "type": "Warning", "source": {"component": "kubelet", "host": "gke-a3-7"},
           "firstTimestamp": "2026-04-12T10:00:00Z", "lastTimestamp": "2026-04-12T10:05:00Z",
           "count": 6}
NODE = {"apiVersion": "v1", "kind": "Event",
        "metadata": {"name": "gke-a3-9.17b", "namespace": "default"},
        "involvedObject": {"kind": "Node", "name": "gke-a3-9", "uid": "gke-a3-9"},
        "reason": "NodeNotReady", "message": "Node gke-a3-9 status is now: NodeNotReady",
        "type": "Normal", "source": {"component": "node-controller"},
        "firstTimestamp": "2026-04-12T10:01:00Z", "lastTimestamp": "2026-04-12T10:01:00Z",
        "count": 1}
SERIES = {"apiVersion": "v1", "kind": "Event",
          "metadata": {"name": "gone-pod.17c", "namespace": NS},
          "involvedObject": {"kind": "Pod", "namespace": NS, "name": "gone-pod"},
          "reason": "FailedScheduling", "message": "0/8 nodes are available",
          "type": "Warning", "reportingComponent": "default-scheduler",
          "eventTime": "2026-04-12T10:02:00.123456Z",
          "series": {"count": 4, "lastObservedTime": "2026-04-12T10:03:00.500000Z"}}


@pytest.fixture
def kube_api() -> Iterator[KubeApiServer]:
    with KubeApiServer() as server:
        yield server


@pytest.fixture
def kube(kube_api: KubeApiServer, tmp_path: Path) -> Kube:
    return Kube.connect("double", str(kube_api.write_kubeconfig(tmp_path / "kubeconfig")))


def test_kubernetes_events_carry_the_identity_of_what_they_are_about(
        kube_api: KubeApiServer, kube: Kube, tmp_path: Path) -> None:
    for obj in (_pod(), KUBELET, NODE, SERIES):
        kube_api.put(obj)
    rows = events.collect(kube, cluster="usc1-prod")
    with Store.connect(f"chdb://{tmp_path / 'store'}") as store:
        store.insert(events.TABLE, rows)
        found = {r["object_name"]: r for r in store.query(
            "SELECT * FROM events ORDER BY ts").dicts()}
    pod = found["pretrain-7b-worker-0"]
    assert {k: pod[k] for k in ("cluster", "namespace", "team", "job", "kind", "run", "role",
                                "pod", "node", "rank")} == {
        "cluster": "usc1-prod", "namespace": NS, "team": "llm", "job": "pretrain-7b",
        "kind": "rayjob", "run": "pretrain-7b-0412", "role": "worker",
        "pod": "pretrain-7b-worker-0", "node": "gke-a3-7", "rank": -1}
    assert (pod["source"], pod["reason"], pod["severity"], pod["count"]) == (
        "kubernetes/kubelet", "BackOff", "Warning", 6)
    assert pod["ts"] == datetime(2026, 4, 12, 10, 5)  # the last time it happened
    node = found["gke-a3-9"]
    assert (node["object_kind"], node["node"], node["pod"], node["namespace"]) == (
        "Node", "gke-a3-9", "", "")
    assert (node["source"], node["reason"], node["severity"]) == (
        "kubernetes/node-controller", "NodeNotReady", "Normal")
    gone = found["gone-pod"]  # a pod no longer listed: what the event itself says
    assert (gone["pod"], gone["namespace"], gone["job"], gone["count"]) == (
        "gone-pod", NS, "", 4)
    assert (gone["source"], gone["ts"]) == ("kubernetes/default-scheduler",
                                            datetime(2026, 4, 12, 10, 3, 0, 500000))


def test_an_event_without_a_pod_listed_takes_the_kubelet_host_as_node() -> None:
    [row] = events.kube_event_rows([KUBELET], pods=[], cluster="c")
    assert (row["pod"], row["node"], row["cluster"], row["job"]) == (
        "pretrain-7b-worker-0", "gke-a3-7", "c", "")
    assert row["ts"] == datetime(2026, 4, 12, 10, 5, tzinfo=UTC)


def test_warden_actions_are_written_to_the_store(tmp_path: Path) -> None:
    dsn = f"chdb://{tmp_path / 'store'}"
    log = events.event_log({Env.TELEMETRY_DSN: dsn, Env.CLUSTER: "usc1-prod"})
    assert isinstance(log, events.StoreEvents)
    log.record("gke-a3-9", "cordon", "Xid 79 on GPU 3", "cordoned (1 recent)")
    log.record("gke-a3-9", "needs-human", "", "settled: needs-human")
    log.record("gke-a3-9", "uncordon", "", "returned to service")
    log.close()
    assert log.writer.dropped == 0
    with Store.connect(dsn) as store:
        rows = store.query("SELECT cluster, node, pod, role, source, object_kind, reason, "
                           "severity, message FROM events ORDER BY ts").rows
    assert rows == [
        ("usc1-prod", "gke-a3-9", "", "warden", "warden", "Node", "WardenCordon", "Warning",
         "cordoned (1 recent): Xid 79 on GPU 3"),
        ("usc1-prod", "gke-a3-9", "", "warden", "warden", "Node", "WardenNeedsHuman",
         "Warning", "settled: needs-human"),
        ("usc1-prod", "gke-a3-9", "", "warden", "warden", "Node", "WardenUncordon", "Normal",
         "returned to service")]


def test_without_a_dsn_warden_only_logs() -> None:
    log = events.event_log({})
    assert type(log) is events.LogEvents
    log.record("n", "cordon", "why", "what")  # never raises, writes nowhere


class _Recorded:
    """An EventLog that keeps what Warden recorded, to check where its activities call it."""

    def __init__(self) -> None:
        self.actions: list[tuple[str, str, str]] = []

    def record(self, node: str, action: str, reason: str, message: str) -> None:
        self.actions.append((node, action, reason))


def test_warden_activities_record_each_action(kube_api: KubeApiServer, kube: Kube) -> None:
    """Warden's real activities, run in an activity context without a Temporal server, on
    the Kubernetes double and the Compute Engine double."""
    kube_api.put(gpu_node("gke-a3-9"))
    gcp = FakeGcp(kube=kube_api)
    try:
        config = parse_config({"memory": {"escalate_after": 2},
                               "cloud": {"compute_url": gcp.url, "metadata_url": gcp.url}})
        recorded = _Recorded()
        seams = Seams(cluster=KubeCluster(kube), telemetry=None,
                      cloud=GceRepair(config.cloud), check=None,
                      events=recorded)
        activities = WardenActivities(config, seams, client=None)
        env = ActivityEnvironment()
        env.run(activities.cordon, "gke-a3-9", "Xid 79", "incident-1")
        env.run(activities.cordon, "gke-a3-9", "Xid 79", "incident-1")  # a retry: nothing new
        env.run(activities.uncordon, "gke-a3-9")
        env.run(activities.cordon, "gke-a3-9", "stress test failed", "incident-2")
        env.run(activities.power, PowerRequest("gke-a3-9", "key-1", "repair", "Xid 79"))
        env.run(activities.set_state, "gke-a3-9", "needs-human")
    finally:
        gcp.close()
    assert recorded.actions == [
        ("gke-a3-9", "cordon", "Xid 79"), ("gke-a3-9", "uncordon", ""),
        ("gke-a3-9", "cordon", "stress test failed"),
        ("gke-a3-9", "escalate", "stress test failed"), ("gke-a3-9", "repair", "Xid 79"),
        ("gke-a3-9", "needs-human", "")]
