"""The Kubernetes kinds `gkr` reads and writes, and where the API serves each one."""

from __future__ import annotations

from dataclasses import dataclass

from generator.errors import GkrError


@dataclass(frozen=True)
class Kind:
    """A served resource: the API group/version and the plural of its URL path."""

    kind: str
    group: str
    version: str
    plural: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


RAYJOB = Kind("RayJob", "ray.io", "v1", "rayjobs")
RAYCLUSTER = Kind("RayCluster", "ray.io", "v1", "rayclusters")
JOB = Kind("Job", "batch", "v1", "jobs")
DEPLOYMENT = Kind("Deployment", "apps", "v1", "deployments")
POD = Kind("Pod", "", "v1", "pods")
EVENT = Kind("Event", "", "v1", "events")
WORKLOAD = Kind("Workload", "kueue.x-k8s.io", "v1beta1", "workloads")

# Job kinds of a spec -> the top-level object gkr applies for it.
TOP_LEVEL = {"rayjob": RAYJOB, "raycluster": RAYCLUSTER, "job": JOB}
BY_KIND = {k.kind: k for k in (RAYJOB, RAYCLUSTER, JOB, DEPLOYMENT, POD, EVENT, WORKLOAD)}


def kind_of(manifest: dict[str, object]) -> Kind:
    """The served resource of a rendered manifest (its version from the manifest)."""
    known = BY_KIND.get(str(manifest.get("kind")))
    if known is None:
        raise GkrError(f"gkr does not apply {manifest.get('kind')} objects")
    group, _, version = str(manifest.get("apiVersion", "")).rpartition("/")
    return Kind(known.kind, group, version, known.plural)
