"""The pods of a resolved job, one `PodPlan` per role of its kind: every decision about them
(GPU or CPU node, container, command, environment, tolerations, rack affinity) is made here;
`runtime.pods.build_pod` lays the plans out and the templates only place the results."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from generator.catalog import Catalog
from generator.resolve import ResolvedJob
from runtime.identity import Env, Label, Role
from runtime.pods import ContainerPlan, NodeChecks, PodPlan

# Ray's default head ports: GCS, dashboard (job submission), client.
RAY_HEAD_PORTS: tuple[dict[str, Any], ...] = (
    {"name": "gcs", "containerPort": 6379},
    {"name": "dashboard", "containerPort": 8265},
    {"name": "client", "containerPort": 10001},
)
SENTINEL_RESOURCES = {"cpu": "100m", "memory": "128Mi"}
CONTAINER = {Role.HEAD: "ray-head", Role.WORKER: "ray-worker", Role.JOB: "main",
             Role.SENTINEL: "sentinel"}
# What a pod learns about where it runs, from the downward API (telemetry rows carry it).
DOWNWARD = {Env.POD: "metadata.name", Env.NODE: "spec.nodeName"}
RUNTIME_IMAGE = "gkr-runtime"  # the catalog's image with the `runtime` package


def plan_pods(job: ResolvedJob) -> dict[Role, PodPlan]:
    return {role: _plan(job, role) for role in job.traits.roles}


def _plan(job: ResolvedJob, role: Role) -> PodPlan:
    on_gpu = role == job.traits.gpu_role and job.accelerator is not None
    return PodPlan(
        labels=job.labels | {Label.ROLE: str(role)},
        annotations=dict(job.annotations),
        container=_container(job, role, on_gpu),
        node_selector=job.gpu_node_selector if on_gpu else job.cpu_node_selector,
        tolerations=[job.reservation_toleration, *(job.gpu_host.tolerations
                                                   if on_gpu and job.gpu_host else ())],
        gpu=job.gpu_host if on_gpu else None,
        network_interfaces=job.interfaces if on_gpu else None,
        priority_class=job.priority.priority_class,
        restart_never=role == Role.JOB,
        affinity=_rack_affinity(job, role) if on_gpu else None,
    )


def _container(job: ResolvedJob, role: Role, on_gpu: bool) -> ContainerPlan:
    if role == Role.SENTINEL:
        address = f"{job.name}-head-svc.{job.namespace}.svc.cluster.local:6379"
        return ContainerPlan(CONTAINER[role], job.image, SENTINEL_RESOURCES,
                             command=["python", "-m", "runtime.sentinel", "--address", address])
    head = role == Role.HEAD
    return ContainerPlan(
        CONTAINER[role], job.image,
        {"cpu": job.head_cpus, "memory": job.head_memory} if head else job.pod_resources,
        command=shell_command(job.spec.cmd) if role == Role.JOB else None,
        working_dir=job.container_working_dir,
        env=_env(job, role, on_gpu),
        ports=RAY_HEAD_PORTS if head else None,
    )


def shell_command(cmd: str | None) -> list[str]:
    """A Job runs its cmd as Ray runs a RayJob's entrypoint: one shell command line, so that
    `cmd` means the same for every kind (pipes, `&&` and `$VAR` work in both)."""
    return ["/bin/sh", "-c", cmd or ""]


def _env(job: ResolvedJob, role: Role, on_gpu: bool) -> list[dict[str, Any]]:
    """Accelerator defaults, then the user's variables, then GKR's identity; sorted by name."""
    accel = job.gpu_host.env if on_gpu and job.gpu_host else {}
    values: Mapping[str, str] = {**accel, **job.user_env, **job.identity_env, Env.ROLE: str(role)}
    env: dict[str, dict[str, Any]] = {
        name: {"name": name, "value": value} for name, value in values.items()}
    env |= {name: {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}
            for name, path in DOWNWARD.items()}
    return [env[name] for name in sorted(env)]


def _rack_affinity(job: ResolvedJob, role: Role) -> dict[str, Any] | None:
    """Pods of the job share a GKE topology domain (seed §4.1): required or preferred."""
    rack = job.spec.rack_affinity
    if rack is None or job.rack_topology_key is None:
        return None
    term = {"topologyKey": job.rack_topology_key,
            "labelSelector": {"matchLabels": {Label.JOB: job.name, Label.ROLE: str(role)}}}
    if rack.required:
        return {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    return {"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 100, "podAffinityTerm": term}]}}


def node_checks(catalog: Catalog, namespace: str | None = None) -> NodeChecks:
    """How node checks are made, from the catalog: `gkr check` uses it, and Warden's rendered
    ConfigMap carries it, so both make the same Job for the same node."""
    platform = catalog.platform
    return NodeChecks(
        namespace=namespace or platform.node_checks.namespace,
        gpu_resource=platform.gpu_resource,
        accelerators={a.gke_accelerator: a.host for a in catalog.accelerators.values()},
        accelerator_label=platform.labels["accelerator"],
        hostname_label=platform.labels["hostname"],
        privileged=platform.node_checks.privileged,
    )
