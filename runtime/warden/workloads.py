"""Which pods on a node are user work, and which of those Warden may drain."""

from __future__ import annotations

from typing import Any

from runtime.warden.config import RecoveryConfig
from runtime.warden.model import Workloads

_DONE = {"Succeeded", "Failed"}


def _is_user_pod(config: RecoveryConfig, pod: dict[str, Any]) -> bool:
    meta = pod.get("metadata", {})
    if meta.get("namespace") in config.system_namespaces:
        return False
    if pod.get("status", {}).get("phase") in _DONE:
        return False
    if "kubernetes.io/config.mirror" in (meta.get("annotations") or {}):
        return False
    owners = meta.get("ownerReferences") or []
    return not any(o.get("kind") == "DaemonSet" for o in owners)


def _is_drainable(config: RecoveryConfig, pod: dict[str, Any]) -> bool:
    """A preemptible single-node job: a batch Job's pod in a preemptible priority class.

    Multi-node work (RayCluster pods) is never drained: one node's eviction would stop a
    whole gang, and live fault tolerance shrinks those instead.
    """
    owners = pod.get("metadata", {}).get("ownerReferences") or []
    is_job = any(o.get("kind") == "Job" for o in owners)
    priority = pod.get("spec", {}).get("priorityClassName", "")
    return is_job and priority in config.preemptible_priority_classes


def classify_pods(config: RecoveryConfig, pods: list[dict[str, Any]]) -> Workloads:
    """Split the user pods of a node into blocking and drainable `namespace/name` refs."""
    blocking: list[str] = []
    drainable: list[str] = []
    for pod in pods:
        if not _is_user_pod(config, pod):
            continue
        meta = pod["metadata"]
        ref = f"{meta['namespace']}/{meta['name']}"
        (drainable if _is_drainable(config, pod) else blocking).append(ref)
    return Workloads(blocking=sorted(blocking), drainable=sorted(drainable))
