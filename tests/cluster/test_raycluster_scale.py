"""`gkr ray scale` on the Kubernetes API double: a held RayCluster's workers change within the
catalog's node pool and Kueue's free quota, through the patch Warden's shrink applies (one
request-id memory for both), and an Argo CD-managed RayCluster only with --force."""

from __future__ import annotations

import pytest

from runtime.kube import Kube
from runtime.warden import KubeCluster, ShrinkRequest
from runtime.warden.shrink import shrink
from tests.cli.conftest import CONTEXT, NS, gkr

SCOPE = ["--cluster", "usc1-prod", "-n", NS]
APPLIED = "warden.gkr.dev/shrink-requests"


def _kueue(quota: str, used: str) -> list[dict]:
    """The rendered ClusterQueue's shape (platform/kueue.yaml.j2) with a bounded GPU quota."""
    flavor = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
              "metadata": {"name": "h200"},
              "spec": {"nodeLabels": {"cloud.google.com/gke-nodepool": "a3u-h200"}}}
    resources = [{"name": "cpu", "nominalQuota": "1000000"},
                 {"name": "memory", "nominalQuota": "1000Ti"},
                 {"name": "nvidia.com/gpu", "nominalQuota": quota}]
    queue = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
             "metadata": {"name": "gkr"},
             "spec": {"resourceGroups": [{"coveredResources": ["cpu", "memory",
                                                               "nvidia.com/gpu"],
                                          "flavors": [{"name": "h200",
                                                       "resources": resources}]}]},
             "status": {"flavorsUsage": [{"name": "h200", "resources": [
                 {"name": "nvidia.com/gpu", "total": used}]}]}}
    return [flavor, queue]


@pytest.fixture
def held(repo, apiserver):
    """llm-dev: a RayCluster of 2 H200 workers (8 GPUs each) that gkr applied."""
    made = gkr("submit", "-f", "jobs/llm/llm-dev.yaml", *SCOPE[:2], "--accelerators", "H200")
    assert made.code == 0, made.err
    return apiserver


def _workers(apiserver) -> dict:
    return apiserver.get("ray.io", "rayclusters", NS, "llm-dev")["spec"]["workerGroupSpecs"][0]


def test_scale_within_the_catalog_and_kueue(held) -> None:
    for obj in _kueue(quota="48", used="16"):  # 32 GPUs free: two more 8-GPU workers at most
        held.put(obj)
    up = gkr("ray", "scale", "llm-dev", "--replicas", "4", *SCOPE)
    assert up.code == 0, up.err
    assert up.out.strip() == ("scaled RayCluster team-llm/llm-dev group workers: 2 -> 4 "
                              "workers (32 GPUs)")
    group = _workers(held)
    assert (group["replicas"], group["maxReplicas"]) == (4, 4)  # KubeRay clamps to the max

    over = gkr("ray", "scale", "llm-dev", "--replicas", "9", *SCOPE)
    assert over.code == 1
    assert "needs 40 more nvidia.com/gpu, but Kueue's ClusterQueue gkr has 32 free" in over.err
    pool = gkr("ray", "scale", "llm-dev", "--replicas", "65", *SCOPE)
    assert pool.code == 1 and "65 pods, but a3u-h200 has 64 nodes" in pool.err
    assert _workers(held)["replicas"] == 4  # a refusal changes nothing

    down = gkr("ray", "scale", "llm-dev", "--replicas", "1", *SCOPE)  # no quota to check
    assert down.code == 0 and "4 -> 1 workers (8 GPUs)" in down.out
    assert (_workers(held)["replicas"], _workers(held)["minReplicas"]) == (1, 1)


def test_gkr_and_warden_share_one_resize_path(held) -> None:
    assert gkr("ray", "scale", "llm-dev", "--replicas", "3", *SCOPE).code == 0
    api = Kube.connect(CONTEXT)
    request = ShrinkRequest("ft-7", NS, "llm-dev", "workers", 1)
    assert shrink(KubeCluster(api), request).replicas == 2
    assert not shrink(KubeCluster(api), request).applied  # once per request id
    ids = held.get("ray.io", "rayclusters", NS, "llm-dev")["metadata"]["annotations"][APPLIED]
    assert ids.startswith("gkr-scale-") and ids.endswith(",ft-7")
    patches = [r.content_type for r in held.requests
               if r.method == "PATCH" and "rayclusters" in r.path]
    # gkr's server-side apply of the RayCluster, then one merge patch each: gkr's, Warden's
    assert patches == ["application/apply-patch+yaml"] + ["application/merge-patch+json"] * 2


def test_refusals_say_why(held) -> None:
    live = held.get("ray.io", "rayclusters", NS, "llm-dev")
    live["metadata"].setdefault("annotations", {})["argocd.argoproj.io/tracking-id"] = (
        "llm:ray.io/RayCluster:team-llm/llm-dev")
    held.put(live)
    managed = gkr("ray", "scale", "llm-dev", "--replicas", "3", *SCOPE)
    assert managed.code == 1 and "managed by Argo CD" in managed.err and "--force" in managed.err
    assert gkr("ray", "scale", "llm-dev", "--replicas", "3", *SCOPE, "--force").code == 0
    group = gkr("ray", "scale", "llm-dev", "--replicas", "3", "--group", "gpu", *SCOPE,
                "--force")
    assert group.code == 1 and "no worker group 'gpu' (groups: workers)" in group.err
    negative = gkr("ray", "scale", "llm-dev", "--replicas", "-1", *SCOPE)
    assert negative.code == 1 and "--replicas -1: 0 or more" in negative.err
    missing = gkr("ray", "scale", "nothing-here", "--replicas", "1", *SCOPE)
    assert missing.code == 1 and "no RayCluster named 'nothing-here'" in missing.err
    assert "Traceback" not in managed.err + group.err + negative.err + missing.err
