"""`Cluster` on the shared Kubernetes layer (`runtime.kube`): Warden's seam, one call each."""

from __future__ import annotations

from contextlib import suppress

from runtime.kube import JOB, NODE, POD, RAYCLUSTER, RAYJOB, Kind, Kube, NotFound, Obj
from runtime.warden.config import KubernetesSettings
from runtime.warden.interfaces import WorkloadKind

WORKLOADS: dict[WorkloadKind, Kind] = {"Job": JOB, "RayJob": RAYJOB, "RayCluster": RAYCLUSTER}


class KubeCluster:
    """`Cluster` on a real API server."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube

    @classmethod
    def connect(cls, settings: KubernetesSettings) -> KubeCluster:
        """The configured kubeconfig (its current context), else in-cluster credentials."""
        return cls(Kube.connect(kubeconfig=settings.kubeconfig,
                                in_cluster=settings.kubeconfig is None,
                                timeout_s=settings.request_timeout_s))

    def list_nodes(self, selector: str) -> list[Obj]:
        return self.kube.list(NODE, labels=selector or None)

    def get_node(self, name: str) -> Obj:
        return self.kube.get(NODE, name)

    def patch_node(self, name: str, patch: Obj) -> Obj:
        return self.kube.patch(NODE, name, patch)

    def node_events(self) -> list[Obj]:
        return self.kube.events(kind="Node")

    def pods_on_node(self, name: str) -> list[Obj]:
        return self.kube.list(POD, fields=f"spec.nodeName={name}")

    def list_pods(self, selector: str) -> list[Obj]:
        return self.kube.list(POD, labels=selector)

    def evict(self, namespace: str, pod: str) -> None:
        with suppress(NotFound):  # already gone: the eviction's goal is reached
            self.kube.evict(pod, namespace=namespace)

    def post_event(self, namespace: str, event: Obj) -> None:
        self.kube.create(event, namespace=namespace)

    def create_job(self, namespace: str, job: Obj) -> Obj:
        return self.kube.create(job, namespace=namespace)

    def get_job(self, namespace: str, name: str) -> Obj:
        return self.kube.get(JOB, name, namespace=namespace)

    def job_pods(self, namespace: str, job: str) -> list[Obj]:
        return self.kube.list(POD, namespace=namespace, labels=f"job-name={job}")

    def get_raycluster(self, namespace: str, name: str) -> Obj:
        return self.kube.get(RAYCLUSTER, name, namespace=namespace)

    def patch_raycluster(self, namespace: str, name: str, patch: Obj) -> Obj:
        return self.kube.patch(RAYCLUSTER, name, patch, namespace=namespace)

    def list_rayjobs(self) -> list[Obj]:
        return self.kube.list(RAYJOB)

    def annotate(self, kind: WorkloadKind, namespace: str, name: str,
                 annotations: dict[str, str]) -> None:
        # A merge patch of the annotations alone: no read, no conflict with its controller.
        self.kube.patch(WORKLOADS[kind], name, {"metadata": {"annotations": annotations}},
                        namespace=namespace)
