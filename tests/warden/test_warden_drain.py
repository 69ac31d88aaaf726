"""Which work Warden drains (pure, property-based), how owners hear of it, and that a webhook
which fails stops no drain: Warden's real activities on the Kubernetes API double and a real
local webhook server."""

from __future__ import annotations

import json
import logging
import socket
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from temporalio.testing import ActivityEnvironment

from runtime.errors import ConfigError
from runtime.identity import Env, Warden
from runtime.kube import Kube
from runtime.warden.activities import Seams, WardenActivities
from runtime.warden.cluster import KubeCluster
from runtime.warden.config import RecoveryConfig, parse_config
from runtime.warden.interfaces import DrainNotice, WorkloadRef
from runtime.warden.notify import WebhookNotifier, drain_text
from runtime.warden.reservations import parse_stamp
from runtime.warden.worker import owner_notifiers
from runtime.warden.workloads import (
    classify_pods,
    drain_notices,
    is_drainable,
    is_single_node,
    ray_worker_pods,
    rayclusters_to_read,
)
from testing.doubles.kube_apiserver import KubeApiServer
from testing.warden import ChatWebhook, gpu_node, ray_pod, raycluster, rayjob, running_pod

RECOVERY = RecoveryConfig()
PREEMPTIBLE = "gkr-preemptible"
SECRET = "/services/T0000/B0000/s3cr3t-token"

# ---- what is drainable: pure ---------------------------------------------------------------

groups = st.lists(st.fixed_dictionaries(
    {"groupName": st.just("g"), "replicas": st.integers(0, 4)},
    optional={"numOfHosts": st.integers(1, 3), "suspend": st.booleans()}), max_size=4)
priorities = st.sampled_from([PREEMPTIBLE, "", "gkr-normal"])


def cluster_of(worker_groups: list[dict], rayjob_name: str = "") -> dict:
    cluster = raycluster("team-a", "rc", 0, rayjob=rayjob_name)
    cluster["spec"]["workerGroupSpecs"] = worker_groups
    return cluster


@given(groups, priorities, st.sampled_from(["worker", "head"]), st.booleans())
def test_a_ray_pod_drains_only_when_preemptible_and_its_cluster_single_node(
        worker_groups, priority, node_type, known):
    pod = ray_pod("team-a", "rc-pod", "gpu-1", "rc", node_type, priority)
    clusters = {"team-a/rc": cluster_of(worker_groups)} if known else {}
    running = sum(g["replicas"] * g.get("numOfHosts", 1) for g in worker_groups
                  if not g.get("suspend"))
    expected = priority == PREEMPTIBLE and known and running <= 1
    assert is_drainable(RECOVERY, pod, clusters) == expected
    assert rayclusters_to_read(RECOVERY, [pod]) == (["team-a/rc"] if priority == PREEMPTIBLE
                                                    else [])


@given(groups, st.integers(1, 4))
def test_a_second_worker_anywhere_makes_the_cluster_multi_node(worker_groups, replicas):
    single = cluster_of(worker_groups)
    grown = cluster_of([*worker_groups, {"groupName": "more", "replicas": replicas}])
    if ray_worker_pods(single) >= 1 or replicas >= 2:
        assert not is_single_node(grown)
    assert ray_worker_pods(grown) == ray_worker_pods(single) + replicas


@given(st.sampled_from(["Job", "ReplicaSet", "StatefulSet", "Deployment"]), priorities)
def test_of_the_other_owners_only_a_preemptible_batch_jobs_pod_drains(kind, priority):
    pod = running_pod("team-b", "p", "gpu-1", owner=kind, priority=priority)
    assert is_drainable(RECOVERY, pod, {}) == (kind == "Job" and priority == PREEMPTIBLE)


@given(st.lists(st.tuples(st.sampled_from(["Job", "RayCluster", "DaemonSet"]), priorities,
                          st.sampled_from(["team-a", "kube-system"]),
                          st.sampled_from(["Running", "Succeeded", "Pending"])), max_size=8))
def test_classification_splits_exactly_the_user_pods(specs):
    pods = []
    for n, (kind, priority, namespace, phase) in enumerate(specs):
        pod = ray_pod(namespace, f"p{n}", "gpu-1", "rc", priority=priority) \
            if kind == "RayCluster" else running_pod(namespace, f"p{n}", "gpu-1", kind, priority)
        pod["status"]["phase"] = phase
        pods.append(pod)
    work = classify_pods(RECOVERY, pods, {"team-a/rc": cluster_of([])})
    user = {f"team-a/p{n}" for n, (kind, _, ns, phase) in enumerate(specs)
            if kind != "DaemonSet" and ns == "team-a" and phase != "Succeeded"}
    assert set(work.blocking) | set(work.drainable) == user
    assert not set(work.blocking) & set(work.drainable)
    assert work.blocking == sorted(work.blocking) and work.drainable == sorted(work.drainable)


def test_gkr_shapes_a_one_pod_rayjob_drains_a_gang_blocks_a_vanished_cluster_blocks():
    one = ray_pod("team-a", "rc-w", "gpu-1", "rc", priority=PREEMPTIBLE)
    assert is_drainable(RECOVERY, one, {"team-a/rc": raycluster("team-a", "rc", 1)})
    assert is_drainable(RECOVERY, one, {"team-a/rc": raycluster("team-a", "rc", 0)})
    assert not is_drainable(RECOVERY, one, {"team-a/rc": raycluster("team-a", "rc", 2)})
    assert not is_drainable(RECOVERY, one, {})  # its RayCluster could not be read
    two_hosts = cluster_of([{"groupName": "tpu", "replicas": 1, "numOfHosts": 2}])
    assert not is_drainable(RECOVERY, one, {"team-a/rc": two_hosts})


def test_one_notice_per_workload_names_the_rayjob_behind_its_cluster():
    pods = [ray_pod("team-a", "rc-w", "gpu-1", "rc", priority=PREEMPTIBLE, owner="ada@ex.com"),
            ray_pod("team-a", "rc-h", "gpu-1", "rc", "head", PREEMPTIBLE),
            running_pod("team-b", "sweep-1", "gpu-1", priority=PREEMPTIBLE)]
    clusters = {"team-a/rc": cluster_of([], rayjob_name="tune")}
    notices = drain_notices(pods, clusters, "gpu-1", "Xid 79", "2030-01-01T00:00:00Z", 60)
    assert [(n.workload, n.pods, n.owner) for n in notices] == [
        (WorkloadRef("Job", "team-b", "sweep-1"), ("team-b/sweep-1",), ""),
        (WorkloadRef("RayJob", "team-a", "tune"), ("team-a/rc-h", "team-a/rc-w"), "ada@ex.com")]
    alone = drain_notices(pods[:1], {"team-a/rc": cluster_of([])}, "gpu-1", "", "", 0)
    assert alone[0].workload == WorkloadRef("RayCluster", "team-a", "rc")


# ---- how owners hear of it ------------------------------------------------------------------

def test_one_chat_message_per_drain_escaped_as_slack_asks():
    def notice(workload: WorkloadRef, pods: tuple[str, ...], owner: str) -> DrainNotice:
        return DrainNotice("gpu-1", "12 GB/s < 300 & falling", "2030-01-01T00:00:00Z", 600,
                           workload, pods, owner)
    text = drain_text([notice(WorkloadRef("Job", "team-b", "sweep"), ("team-b/sweep",), ""),
                       notice(WorkloadRef("RayJob", "team-a", "tune"), ("team-a/rc-w",),
                              "ada@ex.com")])
    assert text.splitlines() == [
        "Warden drains node gpu-1: it is faulty (12 GB/s &lt; 300 &amp; falling); these pods "
        "are evicted at 2030-01-01T00:00:00Z (in 600s):",
        "- Job team-b/sweep: team-b/sweep",
        "- RayJob team-a/tune (owner ada@ex.com): team-a/rc-w"]


def test_a_webhook_must_answer_well_inside_the_activity():
    with pytest.raises(ConfigError, match="webhook_timeout_s must be below activity_timeout_s"):
        parse_config({"activity_timeout_s": 10, "notify": {"webhook_timeout_s": 10}})


@pytest.mark.parametrize("url", ["file:///etc/passwd", "hooks.slack.com/services/x",
                                 "https://:443/services/x", "http://h:port/services/x"])
def test_a_webhook_url_must_be_http_and_is_never_echoed(url):
    with pytest.raises(ConfigError) as raised:
        WebhookNotifier(url, 1.0)
    assert "services" not in str(raised.value) and Env.WARDEN_WEBHOOK in str(raised.value)


def test_only_the_origin_of_a_webhook_is_shown():
    hook = WebhookNotifier("https://bot:pw@hooks.example.com:8443" + SECRET, 1.0)
    assert hook.origin == "https://hooks.example.com:8443"
    assert "s3cr3t" not in repr(hook) and "pw" not in repr(hook)


# ---- the activities on the API double: a failing webhook stops no drain -----------------

def _closed_port_url() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"  # nothing listens there once the probe is closed


@pytest.mark.parametrize("failure", ["500", "unreachable"])
def test_a_failing_webhook_is_logged_and_the_pod_is_still_evicted(
        failure, kube: KubeApiServer, tmp_path: Path, monkeypatch, caplog):
    hook = ChatWebhook(status=500)
    try:
        base = hook.url if failure == "500" else _closed_port_url()
        monkeypatch.setenv(Env.WARDEN_WEBHOOK, base + SECRET)
        activities = _activities(kube, tmp_path)
        kube.put(gpu_node("gpu-d", **{Warden.REASON: "Xid 79"}))
        kube.put(rayjob("team-a", "tune", owner="ada@ex.com"))
        kube.put(raycluster("team-a", "tune-rc", 1, rayjob="tune"))
        kube.put(ray_pod("team-a", "tune-rc-w", "gpu-d", "tune-rc", priority=PREEMPTIBLE,
                         owner="ada@ex.com"))
        env = ActivityEnvironment()
        work = env.run(activities.workloads, "gpu-d")
        assert (work.blocking, work.drainable) == ([], ["team-a/tune-rc-w"])
        with caplog.at_level(logging.WARNING, "runtime.warden.notify"):
            env.run(activities.notify_owners, "gpu-d", work.drainable, 0.0)
        env.run(activities.evict, work.drainable)
    finally:
        hook.close()
    assert kube.get("", "pods", "team-a", "tune-rc-w") is None  # evicted all the same
    assert len(hook.posts) == (1 if failure == "500" else 0)
    assert [e["involvedObject"]["name"] for e in kube.objects("", "events", "team-a")] == [
        "tune-rc-w"]
    note = json.loads(kube.get("ray.io", "rayjobs", "team-a", "tune")["metadata"][
        "annotations"][Warden.DRAIN])
    assert (note["node"], note["reason"], note["pods"]) == ("gpu-d", "Xid 79",
                                                            ["team-a/tune-rc-w"])
    warned = [r.getMessage() for r in caplog.records if r.name == "runtime.warden.notify"]
    assert len(warned) == 1 and "not delivered to http://127.0.0.1:" in warned[0]
    assert ("answered 500 " in warned[0]) == (failure == "500")
    assert "s3cr3t" not in caplog.text  # the URL's credential is never logged


def test_notices_name_a_deadline_grace_ahead_and_a_gone_workload_is_no_error(
        kube: KubeApiServer, tmp_path: Path, monkeypatch):
    monkeypatch.delenv(Env.WARDEN_WEBHOOK, raising=False)
    activities = _activities(kube, tmp_path)
    kube.put(gpu_node("gpu-e"))
    kube.put(running_pod("team-b", "sweep-2", "gpu-e", priority=PREEMPTIBLE))  # no Job object
    before = time.time()
    ActivityEnvironment().run(activities.notify_owners, "gpu-e", ["team-b/sweep-2"], 600.0)
    [event] = kube.objects("", "events", "team-b")
    assert "node gpu-e is faulty; this pod is evicted at " in event["message"]
    deadline = parse_stamp(event["message"].split(" at ")[1].split(" ")[0])
    assert deadline is not None and before + 599 <= deadline <= time.time() + 601
    patches = [r for r in kube.requests if r.method == "PATCH"]
    assert [r.path for r in patches] == ["/apis/batch/v1/namespaces/team-b/jobs/sweep-2"]


def _activities(kube: KubeApiServer, tmp_path: Path) -> WardenActivities:
    """Warden's real activities on the API double, with the notifiers of its worker."""
    config = parse_config({"notify": {"webhook_timeout_s": 2}})
    cluster = KubeCluster(Kube.connect("double", str(kube.write_kubeconfig(
        tmp_path / "kubeconfig"))))
    seams = Seams(cluster=cluster, telemetry=None, cloud=None, check=None,
                  notifiers=owner_notifiers(config, cluster))
    return WardenActivities(config, seams, client=None)
