"""The kinds GKR reads and writes, and where the API serves each one.

A static table, so that the common kinds cost no discovery round trip; the client asks the
server's discovery only for a kind that is not here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Kind:
    """A served resource: API group, version, the plural of its URL path, and its scope."""

    kind: str
    group: str
    version: str
    plural: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


POD = Kind("Pod", "", "v1", "pods")
EVENT = Kind("Event", "", "v1", "events")
NODE = Kind("Node", "", "v1", "nodes", namespaced=False)
JOB = Kind("Job", "batch", "v1", "jobs")
DEPLOYMENT = Kind("Deployment", "apps", "v1", "deployments")
RAYJOB = Kind("RayJob", "ray.io", "v1", "rayjobs")
RAYCLUSTER = Kind("RayCluster", "ray.io", "v1", "rayclusters")
WORKLOAD = Kind("Workload", "kueue.x-k8s.io", "v1beta1", "workloads")

KNOWN: dict[tuple[str, str], Kind] = {
    (k.api_version, k.kind): k
    for k in (POD, EVENT, NODE, JOB, DEPLOYMENT, RAYJOB, RAYCLUSTER, WORKLOAD)
}
