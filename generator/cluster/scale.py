"""`gkr ray scale NAME --replicas N`: a researcher resizes a held RayCluster's worker group,
within what the catalog's node pool holds (generator.rules, the rule a spec's `pods` obeys)
and what Kueue's ClusterQueue has free, through the patch Warden's shrink applies
(runtime.warden: `scale_raycluster`, guarded by resourceVersion, once per request id).
A RayCluster Argo CD manages is refused unless forced: its selfHeal would undo the change.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from decimal import Decimal

from generator.addons import load_addons
from generator.catalog import Accelerator, AcceleratorPool
from generator.cluster.argocd import refuse_if_managed
from generator.cluster.jobs import connect
from generator.cluster.target import Asked, Target
from generator.errors import BadRequest
from generator.rules import gpu_pod_findings
from generator.units import quantity_value
from runtime.kube import RAYCLUSTER, Kind, Kube, NotFound, Obj
from runtime.warden import KubeCluster, ScaleRequest, group_of, scale_raycluster

CLUSTER_QUEUE = Kind("ClusterQueue", "kueue.x-k8s.io", "v1beta2", "clusterqueues",
                     namespaced=False)
RESOURCE_FLAVOR = Kind("ResourceFlavor", "kueue.x-k8s.io", "v1beta2", "resourceflavors",
                       namespaced=False)
WORKERS = "workers"  # the worker group every rendered RayCluster has (ray_cluster_spec.yaml.j2)


@dataclass(frozen=True)
class ResizeRequest:
    """`gkr ray scale`: which RayCluster and group, to how many workers."""

    asked: Asked
    replicas: int
    group: str = WORKERS
    force: bool = False
    """Scale even a RayCluster Argo CD manages."""

    def __post_init__(self) -> None:
        if self.replicas < 0:
            raise BadRequest(f"--replicas {self.replicas}: 0 or more")


@dataclass(frozen=True)
class Resized:
    """What a scale did: the group's replicas before and after, and the GPUs they hold."""

    namespace: str
    name: str
    group: str
    before: int
    replicas: int
    gpus: int
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Group:
    """A worker group as the limits see it: its pods' GPUs and where they run."""

    replicas: int
    gpus: int
    """GPUs per pod."""
    node_pool: str | None


def resize(request: ResizeRequest) -> Resized:
    """Check the limits, then patch through Warden's path; BadRequest says which limit."""
    target, api = connect(request.asked)
    name, ns = str(request.asked.job), target.namespace
    live = api.find(RAYCLUSTER, name, namespace=ns)
    if live is None:
        raise BadRequest(f"no RayCluster named {name!r} in {ns}")
    if not request.force:
        refuse_if_managed(target.root, target.cluster.name, ns, name, live, "scale")
    group = _group(target, live, request.group)
    _within_catalog(target, group, request.replicas)
    notes = _within_kueue(api, target, group, request.replicas)
    outcome = scale_raycluster(KubeCluster(api), ScaleRequest(
        f"gkr-scale-{uuid.uuid4().hex[:12]}", ns, name, request.group, request.replicas))
    return Resized(ns, name, request.group, group.replicas, outcome.replicas,
                   outcome.replicas * group.gpus, notes)


def _group(target: Target, live: Obj, name: str) -> _Group:
    group = group_of(live, name)
    pod = (group.get("template") or {}).get("spec") or {}
    platform = target.catalog.platform
    gpus = sum(int((c.get("resources") or {}).get("limits", {}).get(platform.gpu_resource, 0))
               for c in pod.get("containers", []))
    pool = (pod.get("nodeSelector") or {}).get(platform.labels["node_pool"])
    return _Group(int(group.get("replicas", 0)), gpus, pool)


def _pool(target: Target,
          node_pool: str | None) -> tuple[str, Accelerator, AcceleratorPool] | None:
    """The catalog's accelerator (name and facts) and pool of a GKE node pool."""
    for name, pool in target.cluster.accelerators.items():
        if pool.node_pool == node_pool:
            return name, target.catalog.accelerators[name], pool
    return None


def _within_catalog(target: Target, group: _Group, replicas: int) -> None:
    """The node pool's size and whole-node rule, as for a spec's `pods`."""
    found = _pool(target, group.node_pool)
    if found is None or not group.gpus:
        return  # a CPU group: the catalog sets no count for it
    name, accelerator, pool = found
    problems = [message for _, message in gpu_pod_findings(
        replicas, group.gpus, name, accelerator, pool)]
    if problems:
        raise BadRequest(f"--replicas {replicas}: {'; '.join(problems)}")


def _within_kueue(api: Kube, target: Target, group: _Group, replicas: int) -> tuple[str, ...]:
    """A scale up must fit the GPUs Kueue's ClusterQueue has free in the pool's flavor."""
    more = (replicas - group.replicas) * group.gpus
    if more <= 0:
        return ()
    queue_name = load_addons(target.root).kueue.cluster_queue
    try:
        queue = api.get(CLUSTER_QUEUE, queue_name)
    except NotFound:
        return (f"no ClusterQueue {queue_name}: Kueue's quota not checked",)
    flavor = _flavor(api, target, group.node_pool)
    resource = target.catalog.platform.gpu_resource
    free = _quota(queue, flavor, resource) - _used(queue, flavor, resource)
    if more > free:
        raise BadRequest(f"--replicas {replicas}: needs {more:g} more {resource}, but Kueue's "
                         f"ClusterQueue {queue_name} has {max(free, Decimal(0)):g} free in "
                         f"flavor {flavor}")
    return ()


def _flavor(api: Kube, target: Target, node_pool: str | None) -> str | None:
    label = target.catalog.platform.labels["node_pool"]
    for flavor in api.list(RESOURCE_FLAVOR):
        if ((flavor.get("spec") or {}).get("nodeLabels") or {}).get(label) == node_pool:
            return str(flavor["metadata"]["name"])
    return None


def _quota(queue: Obj, flavor: str | None, resource: str) -> Decimal:
    """nominalQuota plus borrowingLimit of the flavor's resource (0: not in the queue)."""
    for group in (queue.get("spec") or {}).get("resourceGroups", []):
        for entry in group.get("flavors", []):
            if entry.get("name") != flavor:
                continue
            for quota in entry.get("resources", []):
                if quota.get("name") == resource:
                    return (quantity_value(str(quota.get("nominalQuota", 0)))
                            + quantity_value(str(quota.get("borrowingLimit", 0))))
    return Decimal(0)


def _used(queue: Obj, flavor: str | None, resource: str) -> Decimal:
    """What admitted workloads hold of it (the ClusterQueue's status.flavorsUsage)."""
    for usage in (queue.get("status") or {}).get("flavorsUsage", []):
        if usage.get("name") == flavor:
            for entry in usage.get("resources", []):
                if entry.get("name") == resource:
                    return quantity_value(str(entry.get("total", 0)))
    return Decimal(0)
