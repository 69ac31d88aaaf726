"""Change a RayCluster worker group's replicas, once per request id: Warden's shrink on a
live-fault-tolerance request, and `gkr ray scale` (a researcher's resize) through the same
read, patch and guard.

The applied request ids live in an annotation of the RayCluster and change in the same
merge patch as the replicas, guarded by `resourceVersion`: the API server refuses the patch
(409) if anything changed in between, and the retry then sees the id already applied.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from runtime.errors import ConfigError
from runtime.identity import Warden
from runtime.warden.interfaces import Cluster
from runtime.warden.model import ScaleRequest, ShrinkOutcome, ShrinkRequest

APPLIED = Warden.SHRINK_REQUESTS
KEEP_IDS = 50

Obj = dict[str, Any]
Plan = Callable[[Obj], tuple[Obj, ShrinkOutcome]]  # the live RayCluster -> its patch


def group_of(cluster: Obj, name: str) -> Obj:
    """The worker group `name` of a RayCluster; ConfigError naming the groups there are."""
    spec = cluster.get("spec") or {}
    for group in spec.get("workerGroupSpecs", []):
        if group.get("groupName") == name:
            return dict(group)
    there = ", ".join(str(g.get("groupName")) for g in spec.get("workerGroupSpecs", []))
    raise ConfigError("group", f"no worker group {name!r} (groups: {there or 'none'})",
                      str(cluster.get("metadata", {}).get("name", "")))


def _resized(group: Obj, replicas: int, workers_to_delete: list[str]) -> Obj:
    """The group at `replicas`, its bounds widened to hold them (KubeRay clamps to them)."""
    new = {**group, "replicas": replicas}
    new["minReplicas"] = min(int(group.get("minReplicas", 0)), replicas)
    if "maxReplicas" in group:
        new["maxReplicas"] = max(int(group["maxReplicas"]), replicas)
    if workers_to_delete:
        # KubeRay deletes exactly these pods when it reconciles the lower count.
        new["scaleStrategy"] = {"workersToDelete": list(workers_to_delete)}
    return new


def resize_patch(cluster: Obj, group_name: str, replicas: int, request_id: str,
                 workers_to_delete: list[str] | None = None) -> tuple[Obj, ShrinkOutcome]:
    """The merge patch that sets the group to `replicas`, or no patch if `request_id` was
    applied already."""
    meta, spec = cluster["metadata"], cluster["spec"]
    applied = [i for i in (meta.get("annotations") or {}).get(APPLIED, "").split(",") if i]
    group = group_of(cluster, group_name)
    if request_id in applied:
        return {}, ShrinkOutcome(int(group.get("replicas", 0)), applied=False)
    new = _resized(group, max(0, replicas), workers_to_delete or [])
    groups = [new if g.get("groupName") == group_name else g
              for g in spec.get("workerGroupSpecs", [])]
    ids = ",".join([*applied, request_id][-KEEP_IDS:])
    patch = {
        "metadata": {"resourceVersion": meta["resourceVersion"], "annotations": {APPLIED: ids}},
        "spec": {"workerGroupSpecs": groups},
    }
    return patch, ShrinkOutcome(new["replicas"], applied=True)


def shrink_patch(cluster: Obj, request: ShrinkRequest) -> tuple[Obj, ShrinkOutcome]:
    """Lower the group by `request.remove` replicas (never below 0)."""
    current = int(group_of(cluster, request.group).get("replicas", 0))
    return resize_patch(cluster, request.group, current - request.remove, request.request_id,
                        request.workers_to_delete)


def scale_patch(cluster: Obj, request: ScaleRequest) -> tuple[Obj, ShrinkOutcome]:
    """Set the group to `request.replicas`."""
    return resize_patch(cluster, request.group, request.replicas, request.request_id)


def _resize(cluster: Cluster, namespace: str, name: str, plan: Plan) -> ShrinkOutcome:
    """Read the RayCluster, patch it as `plan` says (a 409 if it changed meanwhile)."""
    current = cluster.get_raycluster(namespace, name)
    patch, outcome = plan(current)
    if outcome.applied:
        cluster.patch_raycluster(namespace, name, patch)
    return outcome


def shrink(cluster: Cluster, request: ShrinkRequest) -> ShrinkOutcome:
    """Warden's shrink activity: lower a worker group once per request id."""
    return _resize(cluster, request.namespace, request.cluster,
                   lambda current: shrink_patch(current, request))


def scale(cluster: Cluster, request: ScaleRequest) -> ShrinkOutcome:
    """Set a worker group's replicas once per request id (`gkr ray scale`)."""
    return _resize(cluster, request.namespace, request.cluster,
                   lambda current: scale_patch(current, request))
