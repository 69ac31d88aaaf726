"""The one builder of pods: the pods `gkr render` puts in jobs, and the node-check Jobs that
`gkr check` and Warden start.

Callers decide every value in a `PodPlan`; `build_pod` only lays the values out as Kubernetes
expects them, and adds what every pod on a GPU node needs from the accelerator catalog
(`GpuHost`: the in-memory /dev/shm, library volumes and mounts, native sidecars, device
annotations). So a GPU pod gets the same mounts, sidecars and NCCL variables wherever it is
made, and a node check examines exactly what a training pod would use.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from runtime.errors import ConfigError
from runtime.identity import MANAGED_BY, Annotation, Env, Label, Role, Taint, Warden

Json = dict[str, Any]
SHM_VOLUME = "dshm"
# An emptyDir of medium Memory is a tmpfs; the preflight checks the mount is really there.
SHM_MOUNT = {"path": "/dev/shm", "filesystem": "tmpfs"}
# A cordoned node carries this taint; a check must still run there (kubernetes.io, "Taints").
UNSCHEDULABLE = {"key": "node.kubernetes.io/unschedulable", "operator": "Exists",
                 "effect": "NoSchedule"}
# ... and a node reserved for a namespace (seed §4.3) is checked like any other.
RESERVED = {"key": Taint.RESERVED_FOR, "operator": "Exists"}


class GpuHost(BaseModel):
    """What a pod on one accelerator's nodes needs: a row of the accelerator catalog (seed §3.1)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    gpus: int = Field(gt=0, description="GPUs per node.")
    shm_size: str = Field(description="Size of the in-memory /dev/shm that NCCL needs.")
    tolerations: list[Json] = Field(default_factory=list, description="For the node taints.")
    annotations: dict[str, str] = Field(default_factory=dict, description="Device annotations.")
    volumes: list[Json] = Field(default_factory=list, description="Driver and plugin volumes.")
    volume_mounts: list[Json] = Field(default_factory=list, description="Their mounts.")
    sidecars: list[Json] = Field(default_factory=list, description="Native sidecars.")
    env: dict[str, str] = Field(default_factory=dict, description="NCCL and library variables.")
    plugin_paths: list[str] = Field(default_factory=list, description="Library dirs to check.")

    def expectations(self, gpus: int | None = None, node: str | None = None) -> Json:
        """The preflight's expectations of a pod given `gpus` of this node (default: all)."""
        expect: Json = {
            "gpus": self.gpus if gpus is None else gpus,
            "transport_env": {k: v for k, v in self.env.items() if k.startswith("NCCL_")},
            "plugin_paths": self.plugin_paths,
            "mounts": [SHM_MOUNT],
        }
        return expect | ({"node": node} if node else {})


@dataclass(frozen=True)
class ContainerPlan:
    """The workload container; sidecars come from the `GpuHost`."""

    name: str
    image: str
    resources: Json
    command: Sequence[str] | None = None
    working_dir: str | None = None
    env: Sequence[Json] | None = None
    ports: Sequence[Json] | None = None
    privileged: bool = False  # reading the kernel log needs it (node checks only)
    findings_from_logs: bool = False  # the kubelet copies the log tail into the status
    volume_mounts: Sequence[Json] = ()  # of the plan's own volumes, after the GpuHost's


@dataclass(frozen=True)
class PodPlan:
    """Every decision about one pod template."""

    labels: dict[str, str]
    annotations: dict[str, str]
    container: ContainerPlan
    node_selector: dict[str, str]
    tolerations: Sequence[Json]
    gpu: GpuHost | None = None
    network_interfaces: str | None = None  # GKE multi-network annotation of the node pool
    priority_class: str | None = None
    restart_never: bool = False
    affinity: Json | None = None
    grace_s: int = 60
    volumes: Sequence[Json] = ()  # besides the GpuHost's (e.g. the telemetry dump folder)


def build_pod(plan: PodPlan) -> Json:
    """The pod template (metadata and spec) of a plan: plain data, sharing nothing with it."""
    pod = {"metadata": {"labels": plan.labels, "annotations": _annotations(plan)},
           "spec": _spec(plan)}
    return json.loads(json.dumps(pod))  # also turns StrEnum values into plain strings


def _annotations(plan: PodPlan) -> dict[str, str]:
    notes = dict(plan.annotations) | (plan.gpu.annotations if plan.gpu else {})
    if plan.network_interfaces:
        notes |= {"networking.gke.io/default-interface": "eth0",
                  "networking.gke.io/interfaces": plan.network_interfaces}
    return notes


def _spec(plan: PodPlan) -> Json:
    spec: Json = {"priorityClassName": plan.priority_class} if plan.priority_class else {}
    if plan.restart_never:
        spec["restartPolicy"] = "Never"
    spec |= {
        "terminationGracePeriodSeconds": plan.grace_s,
        # Job pods never call the Kubernetes API; RuntimeDefault seccomp is the baseline.
        "automountServiceAccountToken": False,
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "nodeSelector": dict(plan.node_selector),
        "tolerations": [dict(t) for t in plan.tolerations],
    }
    if plan.affinity:
        spec["affinity"] = plan.affinity
    if plan.gpu:
        spec["volumes"] = [{"name": SHM_VOLUME, "emptyDir": {"medium": "Memory",
                                                              "sizeLimit": plan.gpu.shm_size}},
                           *plan.gpu.volumes]
        if plan.gpu.sidecars:
            spec["initContainers"] = [s | {"restartPolicy": "Always"} for s in plan.gpu.sidecars]
    if plan.volumes:
        spec["volumes"] = [*spec.get("volumes", ()), *plan.volumes]
    spec["containers"] = [_container(plan.container, plan.gpu)]
    return spec


def _container(plan: ContainerPlan, gpu: GpuHost | None) -> Json:
    container: Json = {"name": plan.name, "image": plan.image}
    optional = {"command": plan.command, "workingDir": plan.working_dir, "env": plan.env,
                "ports": plan.ports}
    container |= {key: list(value) if isinstance(value, Sequence) and not isinstance(value, str)
                  else value for key, value in optional.items() if value}
    container["resources"] = {"requests": plan.resources, "limits": plan.resources}
    if gpu:
        container["volumeMounts"] = [{"name": SHM_VOLUME, "mountPath": "/dev/shm"},
                                     *gpu.volume_mounts]
    if plan.volume_mounts:
        container["volumeMounts"] = [*container.get("volumeMounts", ()), *plan.volume_mounts]
    if plan.findings_from_logs:
        container["terminationMessagePolicy"] = "FallbackToLogsOnError"
    # A privileged container cannot also forbid escalation (the API server refuses both).
    container["securityContext"] = {"privileged": True} if plan.privileged else {
        "allowPrivilegeEscalation": False, "capabilities": {"drop": ["NET_RAW"]}}
    return container


@dataclass(frozen=True)
class NodeCheck:
    """One run of a check suite on one node, with all of the node's GPUs."""

    node: str
    run: str  # who asked, e.g. Warden's workflow run: the Job's name derives from it
    namespace: str
    image: str
    command: Sequence[str]
    host: GpuHost
    gpu_resource: str  # the extended resource of the GPUs (nvidia.com/gpu)
    hostname_label: str  # the node label that pins the pod (kubernetes.io/hostname)
    privileged: bool  # the kernel-log check needs it, where the platform allows it
    deadline_s: int

    @property
    def job_name(self) -> str:
        return check_job_name(self.run)


def check_job_name(run: str) -> str:
    """A DNS-1123 Job name derived from the run (node names and run ids can be long)."""
    return "gkr-check-" + hashlib.sha256(run.encode()).hexdigest()[:16]


PREFLIGHT = ["python", "-m", "runtime.preflight"]  # the suite of seed §2.4, in the runtime image
# A RayJob's entrypoint when its preflight gates it: the driver that checks every worker pod
# (runtime.preflight.gate), then runs the job's cmd.
PREFLIGHT_GATE = ["python", "-m", "runtime.preflight.gate"]


class CheckSuite(BaseModel):
    """A check run as a Kubernetes Job pinned to the node."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    image: str = Field(description="Container image of the check, by digest.")
    command: list[str] = Field(description="Argv of the check (no shell).")
    timeout_s: float = Field(900.0, gt=0, description="Deadline of the Job.")


class NodeChecks(BaseModel):
    """How node checks are made on a cluster: rendered from the catalog for `gkr check` and for
    Warden's ConfigMap alike, so both build the same Job for the same node."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    namespace: str = Field(description="Namespace of the check Jobs.")
    gpu_resource: str = Field("nvidia.com/gpu", description="Extended resource of the GPUs.")
    accelerators: dict[str, GpuHost] = Field(
        default_factory=dict,
        description="What a pod needs on each accelerator, by the node's accelerator label value.",
    )
    accelerator_label: str = Field(
        "cloud.google.com/gke-accelerator", description="Node label naming the accelerator.")
    hostname_label: str = Field("kubernetes.io/hostname", description="Node label to pin by.")
    privileged: bool = Field(
        True, description="Check pods may read the kernel log (privileged) where allowed.")

    def node_check(self, node: Json, suite: CheckSuite, run: str) -> NodeCheck:
        """The check of one node (its API object), with the facts of the accelerator it carries."""
        name = node["metadata"]["name"]
        value = (node["metadata"].get("labels") or {}).get(self.accelerator_label, "")
        host = self.accelerators.get(value)
        if host is None:
            known = ", ".join(sorted(self.accelerators)) or "none"
            raise ConfigError("checks.accelerators", f"node {name} carries accelerator "
                              f"{value!r}; known: {known}, so its GPUs cannot be checked")
        return NodeCheck(
            node=name, run=run, namespace=self.namespace, image=suite.image,
            command=suite.command, host=host, gpu_resource=self.gpu_resource,
            hostname_label=self.hostname_label, privileged=self.privileged,
            deadline_s=int(suite.timeout_s))


def check_job(check: NodeCheck) -> Json:
    """The batch/v1 Job of a node check; the same for `gkr check` and for Warden."""
    labels = {MANAGED_BY[0]: MANAGED_BY[1], Label.JOB: check.job_name, Label.ROLE: str(Role.CHECK)}
    notes = {Annotation.NODE: check.node, Warden.CHECK_RUN: check.run}
    gpus = {check.gpu_resource: check.host.gpus}
    env = [{"name": Env.PREFLIGHT, "value": json.dumps(check.host.expectations(node=check.node))},
           *({"name": k, "value": v} for k, v in sorted(check.host.env.items()))]
    pod = build_pod(PodPlan(
        labels=labels, annotations=notes, gpu=check.host, restart_never=True,
        node_selector={check.hostname_label: check.node},
        tolerations=[UNSCHEDULABLE, *check.host.tolerations, RESERVED],
        container=ContainerPlan(name="check", image=check.image, command=check.command,
                                env=env, resources=gpus, privileged=check.privileged,
                                findings_from_logs=True),
    ))
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": check.job_name, "namespace": check.namespace, "labels": labels,
                     "annotations": notes},
        "spec": {"backoffLimit": 0, "activeDeadlineSeconds": check.deadline_s,
                 "ttlSecondsAfterFinished": 86400, "template": pod},
    }
