"""Which pods on a node are user work, which of those Warden may drain, and whose they are.

Pure functions over the API's JSON: the activities read the pods and RayClusters, these decide.
KubeRay makes a RayCluster the controller (ownerReference) of its head and worker pods, and a
RayJob the controller of the RayCluster it creates (ray-operator, `SetControllerReference` in
the RayCluster and RayJob reconcilers); a batch Job owns its pods the same way.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from runtime.identity import Annotation
from runtime.warden.config import RecoveryConfig
from runtime.warden.interfaces import DrainNotice, WorkloadRef
from runtime.warden.model import Workloads

Json = dict[str, Any]
_DONE = {"Succeeded", "Failed"}


def pod_ref(pod: Json) -> str:
    """`namespace/name` of a pod (or any namespaced object)."""
    meta = pod["metadata"]
    return f"{meta['namespace']}/{meta['name']}"


def _owner(obj: Json, kind: str) -> str | None:
    """The name of the object's owner of this kind, if it has one."""
    refs = obj.get("metadata", {}).get("ownerReferences") or []
    return next((ref.get("name") for ref in refs if ref.get("kind") == kind), None)


def _is_user_pod(config: RecoveryConfig, pod: Json) -> bool:
    meta = pod.get("metadata", {})
    if meta.get("namespace") in config.system_namespaces:
        return False
    if pod.get("status", {}).get("phase") in _DONE:
        return False
    if "kubernetes.io/config.mirror" in (meta.get("annotations") or {}):
        return False
    return _owner(pod, "DaemonSet") is None


def user_pods(config: RecoveryConfig, pods: Iterable[Json]) -> list[Json]:
    """The pods that are user work: not system, not finished, not static, not per-node."""
    return [pod for pod in pods if _is_user_pod(config, pod)]


def _preemptible(config: RecoveryConfig, pod: Json) -> bool:
    return pod.get("spec", {}).get("priorityClassName", "") in config.preemptible_priority_classes


def raycluster_ref(pod: Json) -> str | None:
    """`namespace/name` of the RayCluster a pod belongs to, if it is a Ray pod."""
    name = _owner(pod, "RayCluster")
    return None if name is None else f"{pod['metadata']['namespace']}/{name}"


def rayclusters_to_read(config: RecoveryConfig, pods: Iterable[Json]) -> list[str]:
    """The RayClusters whose shape decides whether their pods here may be drained: those of
    preemptible user pods (any other Ray pod blocks whatever its cluster's shape)."""
    refs = {raycluster_ref(pod) for pod in user_pods(config, pods) if _preemptible(config, pod)}
    return sorted(ref for ref in refs if ref is not None)


def ray_worker_pods(raycluster: Json) -> int:
    """Worker pods the RayCluster asks for: replicas x numOfHosts over its worker groups, with
    the CRD's defaults (0 replicas, 1 host); a suspended group has none."""
    groups = raycluster.get("spec", {}).get("workerGroupSpecs") or []
    return sum(max(0, int(g.get("replicas") or 0)) * max(1, int(g.get("numOfHosts") or 1))
               for g in groups if not g.get("suspend"))


def is_single_node(raycluster: Json) -> bool:
    """Whether the RayCluster's work runs on one node: a head and at most one worker pod.

    GKR renders every Ray job with its head on the CPU pool (no work scheduled there) and one
    worker pod per GPU node, so a one-pod job has one worker; a head-only cluster (no workers)
    is single-node too. Two workers or more are a gang across nodes: live fault tolerance
    (torchft) shrinks those around a faulty node, so Warden must not evict one of them.
    """
    return ray_worker_pods(raycluster) <= 1


def is_drainable(config: RecoveryConfig, pod: Json, rayclusters: Mapping[str, Json]) -> bool:
    """Whether Warden may evict this user pod from a faulty node after notice and grace.

    Only preemptible work: its owner accepted, by the priority class, that it may be stopped
    and started again elsewhere (seed §4.2). And only work confined to this node, whose
    controller recreates it on a healthy one: a batch Job's pod, or a pod of a single-node
    RayCluster (KubeRay recreates missing head and worker pods). A multi-node RayCluster's pod
    blocks (see `is_single_node`), as does one whose RayCluster could not be read: without its
    shape, stopping it could stop a gang.
    """
    if not _preemptible(config, pod):
        return False
    if _owner(pod, "Job") is not None:
        return True
    ref = raycluster_ref(pod)
    return ref is not None and ref in rayclusters and is_single_node(rayclusters[ref])


def classify_pods(config: RecoveryConfig, pods: Iterable[Json],
                  rayclusters: Mapping[str, Json]) -> Workloads:
    """Split the user pods of a node into blocking and drainable `namespace/name` refs;
    `rayclusters` holds (by `namespace/name`) those `rayclusters_to_read` named."""
    blocking: list[str] = []
    drainable: list[str] = []
    for pod in user_pods(config, pods):
        (drainable if is_drainable(config, pod, rayclusters) else blocking).append(pod_ref(pod))
    return Workloads(blocking=sorted(blocking), drainable=sorted(drainable))


def workload_of(pod: Json, rayclusters: Mapping[str, Json]) -> WorkloadRef:
    """What the owner of a drainable pod submitted: its Job, or the RayJob that created its
    RayCluster, or the RayCluster itself when they made one directly."""
    namespace = pod["metadata"]["namespace"]
    job = _owner(pod, "Job")
    if job is not None:
        return WorkloadRef("Job", namespace, job)
    ref = raycluster_ref(pod)
    assert ref is not None, "a drainable pod is a Job's or a RayCluster's"
    rayjob = _owner(rayclusters.get(ref, {}), "RayJob")
    if rayjob is not None:
        return WorkloadRef("RayJob", namespace, rayjob)
    return WorkloadRef("RayCluster", namespace, ref.split("/", 1)[1])


def _owner_of(pods: list[Json]) -> str:
    """Who submitted the pods: the owner annotation the generator renders on every pod."""
    owners = (((p["metadata"].get("annotations") or {}).get(Annotation.OWNER)) for p in pods)
    return next((owner for owner in owners if owner), "")


def drain_notices(pods: Iterable[Json], rayclusters: Mapping[str, Json], node: str,
                  reason: str, deadline: str, grace_s: float) -> list[DrainNotice]:
    """One notice per workload whose drainable pods on the node are about to be evicted."""
    by_workload: dict[WorkloadRef, list[Json]] = {}
    for pod in pods:
        by_workload.setdefault(workload_of(pod, rayclusters), []).append(pod)
    return [DrainNotice(node, reason, deadline, grace_s, workload,
                        tuple(sorted(pod_ref(p) for p in members)), _owner_of(members))
            for workload, members in sorted(by_workload.items())]
