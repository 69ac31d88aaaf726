"""Shrink a RayCluster worker group on a live-fault-tolerance request, once per request id.

The applied request ids live in an annotation of the RayCluster and change in the same
merge patch as the replicas, guarded by `resourceVersion`: the API server refuses the patch
(409) if anything changed in between, and the retry then sees the id already applied.
"""

from __future__ import annotations

from typing import Any

from runtime.errors import ConfigError
from runtime.identity import Warden
from runtime.warden.model import ShrinkOutcome, ShrinkRequest

APPLIED = Warden.SHRINK_REQUESTS
KEEP_IDS = 50


def _group(spec: dict[str, Any], request: ShrinkRequest) -> dict[str, Any]:
    for group in spec.get("workerGroupSpecs", []):
        if group.get("groupName") == request.group:
            return group
    raise ConfigError("group", f"no worker group {request.group!r}", request.cluster)


def _shrunk(group: dict[str, Any], request: ShrinkRequest) -> dict[str, Any]:
    replicas = max(0, int(group.get("replicas", 0)) - request.remove)
    new = {**group, "replicas": replicas}
    new["minReplicas"] = min(int(group.get("minReplicas", 0)), replicas)
    if request.workers_to_delete:
        # KubeRay deletes exactly these pods when it reconciles the lower count.
        new["scaleStrategy"] = {"workersToDelete": list(request.workers_to_delete)}
    return new


def shrink_patch(cluster: dict[str, Any], request: ShrinkRequest
                 ) -> tuple[dict[str, Any], ShrinkOutcome]:
    """The merge patch that applies the request, or no patch if its id was applied already."""
    meta, spec = cluster["metadata"], cluster["spec"]
    applied = [i for i in (meta.get("annotations") or {}).get(APPLIED, "").split(",") if i]
    group = _group(spec, request)
    if request.request_id in applied:
        return {}, ShrinkOutcome(int(group.get("replicas", 0)), applied=False)
    groups = [
        _shrunk(g, request) if g is group else g for g in spec.get("workerGroupSpecs", [])
    ]
    ids = ",".join([*applied, request.request_id][-KEEP_IDS:])
    patch = {
        "metadata": {"resourceVersion": meta["resourceVersion"], "annotations": {APPLIED: ids}},
        "spec": {"workerGroupSpecs": groups},
    }
    return patch, ShrinkOutcome(_shrunk(group, request)["replicas"], applied=True)
