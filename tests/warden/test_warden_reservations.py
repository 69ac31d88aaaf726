"""Relaunch reservations (paper §4.3): Warden's reservation keeper, from pure decisions to a
real Temporal dev server driving the sweep.

No Kubernetes API server (nor KubeRay, nor a scheduler) can run here: the cluster is the
shared API test double (testing/doubles/kube_apiserver.py) that Warden's real client talks to,
and the tests play KubeRay (RayJob status, worker pods). The RayJob is the one `gkr render`
committed for llm-pretrain-7b, so its annotation, labels and tolerations are the real ones.
"""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from generator.cli import app
from runtime.errors import ConfigError
from runtime.warden import memory
from runtime.warden import reservations as rsv
from runtime.warden.cluster import KubeCluster
from runtime.warden.config import KubernetesSettings, ReservationConfig, parse_config
from runtime.warden.keeper import ReservationKeeper
from testing.doubles.kube_apiserver import KubeApiServer
from testing.warden import gpu_node
from tests.warden.conftest import RunningWorker, fast_config
from tests.warden.test_warden_flow import notes, wait_for

ROOT = Path(__file__).parents[2]
RENDERED = ROOT / "kustomize/overlays/usc1-prod/jobs/team-llm/llm-pretrain-7b.yaml"
KEY = "gkr.dev/reserved-for"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
JOB = "team-llm/llm-pretrain-7b"


# ---- the cluster's actors, played by the test ------------------------------------------------
def rendered_rayjob(name: str = "llm-pretrain-7b", reserve: bool = True) -> dict[str, Any]:
    """The committed render of llm-pretrain-7b, renamed; without its annotation if asked."""
    (job,) = (d for d in yaml.safe_load_all(RENDERED.read_text()) if d["kind"] == "RayJob")
    job["metadata"]["name"] = name
    if not reserve:
        del job["metadata"]["annotations"][rsv.REQUEST]
    job["status"] = {"jobDeploymentStatus": "Running"}
    return job


def worker_pod(rayjob: dict[str, Any], index: int, node: str) -> dict[str, Any]:
    """A worker pod as KubeRay creates it from the RayJob's worker template, bound to a node."""
    template = copy.deepcopy(rayjob["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"])
    labels = {**template["metadata"]["labels"], rsv.JOB_LABEL: rayjob["metadata"]["name"]}
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"{rayjob['metadata']['name']}-worker-{index}",
                     "namespace": rayjob["metadata"]["namespace"], "labels": labels},
        "spec": {**template["spec"], "nodeName": node},
        "status": {"phase": "Running"},
    }


def tainted_node(name: str, *taints: dict[str, str], **annotations: str) -> dict[str, Any]:
    node = gpu_node(name, **annotations)
    node["spec"]["taints"] = [dict(t) for t in taints]
    return node


def faulty_node(name: str) -> dict[str, Any]:
    """A node Warden cordoned for a fault and handed to a human (no sweep recovers it)."""
    node = gpu_node(name, **{memory.OWNED: memory.OWNER, memory.STATE: "needs-human"})
    node["spec"]["unschedulable"] = True
    return node


def finish(kube: KubeApiServer, rayjob: dict[str, Any], status: str = "Complete") -> None:
    """KubeRay on a finished RayJob with shutdownAfterJobFinishes: status, then pods go."""
    kube.put({**kube.get("ray.io", "rayjobs", rayjob["metadata"]["namespace"],
                         rayjob["metadata"]["name"]), "status": {"jobDeploymentStatus": status}})
    namespace = rayjob["metadata"]["namespace"]
    for pod in kube.objects("", "pods", namespace):
        if pod["metadata"]["labels"].get(rsv.JOB_LABEL) == rayjob["metadata"]["name"]:
            kube.delete("", "pods", namespace, pod["metadata"]["name"])


def tolerates(tolerations: list[dict[str, str]], taint: dict[str, str]) -> bool:
    """Kubernetes' Toleration.ToleratesTaint (k8s.io/api/core/v1/toleration.go)."""
    def one(t: dict[str, str]) -> bool:
        if t.get("effect") and t["effect"] != taint["effect"]:
            return False
        if t.get("key") and t["key"] != taint["key"]:
            return False
        if t.get("operator") == "Exists":
            return True
        return bool(t.get("key")) and t.get("value", "") == taint.get("value", "")
    return any(one(t) for t in tolerations)


def node_taints(kube: KubeApiServer, name: str) -> list[dict[str, str]]:
    return kube.get("", "nodes", "", name)["spec"].get("taints") or []


# ---- pure decisions ---------------------------------------------------------------------------
def test_taint_key_must_be_a_label_key():
    with pytest.raises(ConfigError, match=r"reservations\.taint_key"):
        parse_config({"reservations": {"taint_key": "not a key!"}})
    assert parse_config({}).reservations.taint_key == KEY


def _reserved(namespace: str, until: str, *extra: dict[str, str], name: str = "n"
              ) -> dict[str, Any]:
    node = tainted_node(name, *extra, {"key": KEY, "value": namespace, "effect": "NoSchedule"},
                        **{rsv.BY: f"{namespace}/old", rsv.UNTIL: until})
    node["metadata"]["resourceVersion"] = "5"
    return node


def test_reserving_again_extends_and_release_keeps_other_taints():
    node = _reserved("team-a", rsv.stamp(2000.0), GPU_TAINT)
    node["metadata"]["annotations"][rsv.TRACKED_JOB] = "team-a/new"
    patch = rsv.reserve_patch(node, KEY, until=1500.0)
    assert patch["metadata"]["annotations"][rsv.UNTIL] == rsv.stamp(2000.0)  # never shortened
    assert patch["metadata"]["annotations"][rsv.BY] == "team-a/new"
    assert patch["metadata"]["resourceVersion"] == "5"
    assert patch["spec"]["taints"] == [GPU_TAINT, {"key": KEY, "value": "team-a",
                                                   "effect": "NoSchedule"}]
    released = rsv.release_patch(node, KEY)
    assert released["spec"]["taints"] == [GPU_TAINT]
    assert released["metadata"]["annotations"] == {rsv.UNTIL: None, rsv.BY: None}


def test_unreadable_end_expires_and_foreign_taints_are_recognised():
    held = rsv.reservation(_reserved("team-a", "next tuesday"))
    assert held is not None and rsv.expired(held, now=0.0)
    platform = tainted_node("p", {"key": KEY, "value": "team-a", "effect": "NoSchedule"})
    assert rsv.reservation(platform) is None and rsv.foreign_reservation(platform, KEY)
    assert not rsv.foreign_reservation(_reserved("team-a", rsv.stamp(0)), KEY)


def test_a_fault_cordon_drops_the_claim_of_the_job_that_ran_there():
    patch, _ = memory.cordon_patch({rsv.TRACKED_JOB: JOB}, 0.0, 60.0, "Xid 79", "run/1")
    written = patch["metadata"]["annotations"]
    assert written[rsv.TRACKED_JOB] is None and written[rsv.TRACKED_SECONDS] is None


# ---- the keeper against the API double, with an explicit clock ---------------------------
@pytest.fixture
def keeper(kube: KubeApiServer, tmp_path: Path) -> ReservationKeeper:
    settings = KubernetesSettings(kubeconfig=str(kube.write_kubeconfig(tmp_path / "kc")))
    return ReservationKeeper(ReservationConfig(max_reservation_s=600),
                             KubeCluster.connect(settings))


def test_keeper_waits_for_the_pods_and_leaves_other_claims_alone(kube, keeper):
    job = rendered_rayjob()
    kube.put(job)
    kube.put(tainted_node("gpu-1", GPU_TAINT))
    platform_taint = {"key": KEY, "value": "team-llm", "effect": "NoSchedule"}
    kube.put(tainted_node("gpu-team", platform_taint))  # a pool reserved for the team
    kube.put(_reserved("team-vision", rsv.stamp(10_000.0), name="gpu-vis"))
    for index, node in enumerate(("gpu-1", "gpu-team", "gpu-vis")):
        kube.put(worker_pod(job, index, node))

    assert sorted(keeper.sweep(now=1000.0).tracked) == [
        f"gpu-1: {JOB}", f"gpu-team: {JOB}", f"gpu-vis: {JOB}"]
    assert notes(kube, "gpu-1")[rsv.TRACKED_SECONDS] == "1800"
    kube.put({**kube.get("ray.io", "rayjobs", "team-llm", job["metadata"]["name"]),
              "status": {"jobDeploymentStatus": "Failed"}})
    assert keeper.sweep(now=1001.0).reserved == []  # its pods are still there
    finish(kube, job, "Failed")

    swept = keeper.sweep(now=1002.0)
    assert swept.reserved == [f"gpu-1: {JOB} until {rsv.stamp(1602.0)}"]  # capped at 600 s
    assert node_taints(kube, "gpu-team") == [platform_taint]
    assert rsv.TRACKED_JOB not in notes(kube, "gpu-team")
    assert notes(kube, "gpu-vis")[rsv.BY] == "team-vision/old"
    assert keeper.sweep(now=1003.0).reserved == []  # idempotent: nothing left to do

    assert keeper.sweep(now=1602.0).released == [f"gpu-1: {JOB}"]
    assert node_taints(kube, "gpu-1") == [GPU_TAINT]
    assert node_taints(kube, "gpu-team") == [platform_taint]  # never Warden's to remove
    assert keeper.sweep(now=1603.0).released == []


def test_disabled_keeper_reads_nothing(kube, keeper):
    quiet = ReservationKeeper(ReservationConfig(enabled=False), keeper.cluster)
    assert quiet.sweep(now=0.0) == quiet.sweep(now=1.0)
    assert kube.requests == []


# ---- end to end: the sweep on a real Temporal dev server -------------------------------------
def _reservation_of(kube: KubeApiServer, name: str) -> dict[str, Any] | None:
    """The node as Warden reserved it, from the double's change log (however brief it was)."""
    for change in kube.history("", "nodes"):
        node = change.object
        if node["metadata"]["name"] == name and rsv.BY in rsv.notes(node):
            return node
    return None


@pytest.mark.slow
def test_finished_rayjob_reserves_its_nodes_for_its_namespace_until_expiry(
        loop, temporal, doubles, tmp_path):
    kube, _, _ = doubles
    for node in ("gpu-r1", "gpu-r2", "gpu-plain"):
        kube.put(tainted_node(node, GPU_TAINT))
    kube.put(faulty_node("gpu-faulty"))  # cordoned for a fault while the job ran
    job, plain = rendered_rayjob(), rendered_rayjob("llm-plain", reserve=False)
    for rayjob, nodes in ((job, ("gpu-r1", "gpu-r2", "gpu-faulty")), (plain, ("gpu-plain",))):
        kube.put(rayjob)
        for index, node in enumerate(nodes):
            kube.put(worker_pod(rayjob, index, node))
    config = fast_config(temporal, doubles, tmp_path, detection={"interval_s": 60},
                         recovery={"sweep_interval_s": 60},
                         reservations={"interval_s": 0.2, "max_reservation_s": 2})

    worker = RunningWorker(loop, temporal, config)
    try:
        for node in ("gpu-r1", "gpu-r2"):
            wait_for(f"{node} tracked", lambda n=node: notes(kube, n).get(rsv.TRACKED_JOB) == JOB)
    finally:
        worker.stop()  # the claim lives on the nodes, not in Warden
    finish(kube, plain)
    finish(kube, job)
    kube.delete("ray.io", "rayjobs", "team-llm", "llm-pretrain-7b")  # its TTL passed

    worker = RunningWorker(loop, temporal, config)
    try:
        held = [wait_for(f"{n} reserved", lambda n=n: _reservation_of(kube, n))
                for n in ("gpu-r1", "gpu-r2")]
        for node in ("gpu-r1", "gpu-r2"):
            wait_for(f"{node} released", lambda n=node: node_taints(kube, n) == [GPU_TAINT])
    finally:
        worker.stop()

    template = job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]
    other = [{**t, "value": "team-vision"} if t["key"] == KEY else t
             for t in template["tolerations"]]
    for node in held:
        taint = next(t for t in node["spec"]["taints"] if t["key"] == KEY)
        assert taint == {"key": KEY, "value": "team-llm", "effect": "NoSchedule"}
        assert GPU_TAINT in node["spec"]["taints"]
        assert tolerates(template["tolerations"], taint)  # the namespace's relaunch fits
        assert not tolerates(other, taint)  # another namespace's pod does not
        assert rsv.parse_stamp(node["metadata"]["annotations"][rsv.UNTIL]) is not None
        assert node["metadata"]["annotations"][rsv.BY] == JOB
    for node in ("gpu-r1", "gpu-r2"):
        assert not {rsv.BY, rsv.UNTIL, rsv.TRACKED_JOB} & set(notes(kube, node))
    assert kube.requests_to("PATCH", "/api/v1/nodes/gpu-plain") == []
    assert kube.requests_to("PATCH", "/api/v1/nodes/gpu-faulty") == []


@pytest.mark.slow
def test_status_lists_reserved_nodes(temporal, kube, tmp_path):
    until = rsv.stamp(time.time() + 600)
    kube.put(tainted_node("gpu-held", {"key": KEY, "value": "team-llm", "effect": "NoSchedule"},
                          **{rsv.BY: JOB, rsv.UNTIL: until}))
    kube.put(gpu_node("gpu-free"))
    address = temporal.client.service_client.config.target_host
    shown = CliRunner().invoke(app, ["warden", "status", "--address", address, "--kubeconfig",
                                     str(kube.write_kubeconfig(tmp_path / "kc")), "-o", "json"])
    assert shown.exit_code == 0, shown.output
    rows = {row["node"]: row for row in json.loads(shown.output)}
    assert (rows["gpu-held"]["reserved_for"], rows["gpu-held"]["reserved_until"]) == (
        "team-llm", until)
    assert "gpu-free" not in rows
