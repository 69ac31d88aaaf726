"""The pods of a resolved job, one `PodPlan` per role of its kind: every decision about them
(GPU or CPU node, container, command, environment, tolerations, rack affinity) is made here;
`runtime.pods.build_pod` lays the plans out and the templates only place the results."""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from typing import Any

from generator.catalog import Catalog
from generator.resolve import ResolvedJob
from generator.telemetry import DUMP_VOLUME, FR_SUBFOLDER, POD_DUMP_DIR, Telemetry, collective_env
from generator.units import parse_duration
from runtime.diloco.config import KEY_DIR
from runtime.identity import Env, Label, Role
from runtime.pods import PREFLIGHT_GATE, ContainerPlan, NodeChecks, PodPlan
from runtime.preflight.config import GateConfig

DASHBOARD_PORT = 8265  # Ray's job submission (HTTP): the port KubeRay and its submitter use
# Ray's metrics on every Ray node, on KubeRay's default port and name (ray-operator/controllers/
# ray/utils/constant.go: MetricsPortName "metrics", DefaultMetricsPort 8080; KubeRay adds the
# port when a Ray container lacks it). Rendered on head and workers, and as their
# `metrics-export-port`, so that the tree itself holds what the PodMonitors and the
# NetworkPolicy name (generator.platform.monitoring, generator.netpolicy).
METRICS_PORT = 8080
RAY_METRICS_PORT: dict[str, Any] = {"name": "metrics", "containerPort": METRICS_PORT}
# Ray's default head ports: GCS, dashboard (job submission), client; and the metrics port.
RAY_HEAD_PORTS: tuple[dict[str, Any], ...] = (
    {"name": "gcs", "containerPort": 6379},
    {"name": "dashboard", "containerPort": DASHBOARD_PORT},
    {"name": "client", "containerPort": 10001},
    RAY_METRICS_PORT,
)
ROLE_PORTS: dict[Role, tuple[dict[str, Any], ...]] = {
    Role.HEAD: RAY_HEAD_PORTS, Role.WORKER: (RAY_METRICS_PORT,)}
SENTINEL_RESOURCES = {"cpu": "100m", "memory": "128Mi"}
CONTAINER = {Role.HEAD: "ray-head", Role.WORKER: "ray-worker", Role.JOB: "main",
             Role.SENTINEL: "sentinel"}
# What a pod learns about where it runs, from the downward API: telemetry rows carry its
# name and node; its listeners (aux proxies, torchft) bind its IP, not every interface.
DOWNWARD = {Env.POD: "metadata.name", Env.NODE: "spec.nodeName", Env.POD_IP: "status.podIP"}
RUNTIME_IMAGE = "gkr-runtime"  # the catalog's image with the `runtime` package
WORKER_GROUP = "workers"  # the one worker group of every Ray job (ray_cluster_spec.yaml.j2)
KEY_VOLUME = "diloco-keys"
KEY_MODE = 0o400


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
        volumes=[*([dump_volume(job.platform.telemetry)] if on_gpu else ()),
                 *key_volumes(job, role)],
    )


def _container(job: ResolvedJob, role: Role, on_gpu: bool) -> ContainerPlan:
    if role == Role.SENTINEL:  # its identity and the telemetry store: gkr-ui lists its events
        return ContainerPlan(CONTAINER[role], job.image, SENTINEL_RESOURCES,
                             command=sentinel_command(job), env=_env(job, role, on_gpu))
    head = role == Role.HEAD
    return ContainerPlan(
        CONTAINER[role], job.image,
        {"cpu": job.head_cpus, "memory": job.head_memory} if head else job.pod_resources,
        command=shell_command(job.spec.cmd) if role == Role.JOB else None,
        working_dir=job.container_working_dir,
        env=_env(job, role, on_gpu),
        ports=ROLE_PORTS.get(role),
        volume_mounts=[*(dump_mounts(job) if on_gpu else ()), *key_mounts(job, role)],
    )


def role_ports(role: Role) -> dict[str, int]:
    """The named container ports of a role's pods: name → number."""
    return {port["name"]: port["containerPort"] for port in ROLE_PORTS.get(role, ())}


def pod_expectations(job: ResolvedJob) -> dict[str, Any]:
    """What the preflight in one of the job's GPU pods checks: the GPUs it was given (a whole
    node unless the job asked for fewer), the accelerator's transport variables, plugins and
    mounts; a CPU pod needs none of them."""
    return job.gpu_host.expectations(gpus=job.gpus) if job.gpu_host else {"gpus": 0}


def gated(job: ResolvedJob) -> bool:
    """Whether the preflight gate runs before the job's cmd (a RayJob's driver runs it)."""
    return job.traits.gated and job.spec.preflight.enabled


def entrypoint(job: ResolvedJob) -> str | None:
    """A RayJob's entrypoint: the gate, which runs cmd (GKR_ENTRYPOINT) once every worker pod
    passed, so that the check holds however the RayJob reached the cluster (`gkr submit` or
    Argo CD); or cmd itself when the spec turns the gate off."""
    return shlex.join(PREFLIGHT_GATE) if gated(job) else job.spec.cmd


def gate_settings(job: ResolvedJob) -> str:
    """The gate's settings (GKR_PREFLIGHT_GATE): the pods, what each must offer, the
    accelerator's bandwidth threshold and the spec's policy. Validated by the runtime's own
    model, so a mismatch fails `gkr render` rather than the job."""
    policy, facts = job.spec.preflight, job.accelerator.preflight if job.accelerator else None
    retry = policy.on_failure == "retry"
    settings: dict[str, Any] = {
        "pods": job.spec.pods, "checks": pod_expectations(job), "group": WORKER_GROUP,
        "warden_task_queue": job.warden_task_queue,
        "policy": {"on_failure": policy.on_failure, "attempts": policy.attempts if retry else 1,
                   "replacement_timeout_s": parse_duration(policy.replacement_timeout)},
    }
    if facts is not None:
        settings |= {"min_busbw_gbps": facts.min_busbw_gbps, "message_mib": facts.message_mib}
    GateConfig.model_validate(settings)
    return json.dumps(settings, sort_keys=True, separators=(",", ":"))


def literal_env(value: str) -> str:
    """An env value the kubelet passes on unchanged. It expands `$(NAME)` from the
    container's earlier variables and reduces `$$` to `$` (Kubernetes API reference,
    EnvVar.value), which would change a shell line such as `echo $$`; every `$` doubled
    comes out as written."""
    return value.replace("$", "$$")


def _gate_env(job: ResolvedJob, role: Role) -> dict[str, str]:
    """The head runs the driver: the gate's settings and the cmd it runs after, as written."""
    if role != Role.HEAD or not gated(job):
        return {}
    return {Env.PREFLIGHT_GATE: literal_env(gate_settings(job)),
            Env.ENTRYPOINT: literal_env(job.spec.cmd or "")}


def sentinel_command(job: ResolvedJob) -> list[str]:
    """The sentinel asks the head's API on its dashboard port (a port of the job's own pods,
    so its NetworkPolicy admits it) and tells the owner past the cluster's idle threshold."""
    dashboard = f"http://{job.name}-head-svc.{job.namespace}.svc.cluster.local:{DASHBOARD_PORT}"
    idle = parse_duration(job.cluster.raycluster_idle_after)
    return ["python", "-m", "runtime.sentinel", "--dashboard", dashboard, "--name", job.name,
            "--owner", job.spec.owner, "--idle-after", str(idle)]


def shell_command(cmd: str | None) -> list[str]:
    """A Job runs its cmd as Ray runs a RayJob's entrypoint: one shell command line, so that
    `cmd` means the same for every kind (pipes, `&&` and `$VAR` work in both)."""
    return ["/bin/sh", "-c", cmd or ""]


def _env(job: ResolvedJob, role: Role, on_gpu: bool) -> list[dict[str, Any]]:
    """Accelerator defaults (its peak TFLOP/s for MFU among them) and collective telemetry
    (GPU pods), then the user's variables (which may turn the telemetry off), then GKR's;
    sorted by name after the telemetry password, which must come first: the DSN refers to it
    as `$(NAME)`, and Kubernetes expands only variables defined before the one that refers
    to them."""
    gpu = job.accelerator if on_gpu else None
    accel = {**gpu.host.env, Env.PEAK_TFLOPS: f"{gpu.peak_tflops:g}"} if gpu else {}
    collectives = collective_env(gpu.nccl_inspector_plugin) if gpu else {}
    telemetry = job.platform.telemetry
    values: Mapping[str, str] = {**accel, **collectives, **job.user_env, **job.identity_env,
                                 **_gate_env(job, role),
                                 Env.TELEMETRY_DSN: telemetry.dsn(), Env.ROLE: str(role)}
    env: dict[str, dict[str, Any]] = {
        name: {"name": name, "value": value} for name, value in values.items()}
    env |= {name: {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}
            for name, path in DOWNWARD.items()}
    return [_telemetry_password(telemetry), *(env[name] for name in sorted(env))]


def _telemetry_password(telemetry: Telemetry) -> dict[str, Any]:
    # Optional: a namespace still without the Secret runs its jobs, only without a store.
    ref = {"name": telemetry.secret, "key": telemetry.ingest_key, "optional": True}
    return {"name": Env.TELEMETRY_PASSWORD, "valueFrom": {"secretKeyRef": ref}}


def dump_volume(telemetry: Telemetry) -> dict[str, Any]:
    """The node's telemetry folder. A host folder rather than an emptyDir: Fluent Bit, a
    DaemonSet on the same node, mounts just this folder (read-only) to tail it, where an
    emptyDir would have it mount the kubelet's pod folders whole (every pod's Secrets
    included); and the files outlive the pod, so the last records of an ended pod still go.
    The kubelet makes the folders root's (mode 0755): the training containers run as root."""
    return {"name": DUMP_VOLUME,
            "hostPath": {"path": telemetry.node_dir, "type": "DirectoryOrCreate"}}


def dump_mounts(job: ResolvedJob) -> list[dict[str, Any]]:
    """The job's own subfolder of that folder, whose path names its namespace and job for
    Fluent Bit; the Flight Recorder's subfolder is mounted too, because the recorder writes
    `<prefix><rank>` without making folders (the kubelet makes subPath folders)."""
    folder = job.platform.telemetry.job_subfolder(job.namespace, job.name)
    return [{"name": DUMP_VOLUME, "mountPath": POD_DUMP_DIR, "subPath": folder},
            {"name": DUMP_VOLUME, "mountPath": f"{POD_DUMP_DIR}/{FR_SUBFOLDER}",
             "subPath": f"{folder}/{FR_SUBFOLDER}"}]


def key_volumes(job: ResolvedJob, role: Role) -> list[dict[str, Any]]:
    """A DiLoCo part's CURVE keys (runtime.diloco.keys), from the Secret `gkr diloco keys`
    makes: owner-read-only files (defaultMode 0400). Not optional: a pod without its keys
    waits in ContainerCreating, saying which Secret is missing, rather than starting a link
    that cannot authenticate. Every role that may run the learner's rank 0 (head and
    workers) or the synchroniser gets them; the sentinel does not."""
    if job.key_secret is None or role == Role.SENTINEL:
        return []
    return [{"name": KEY_VOLUME, "secret": {"secretName": job.key_secret,
                                            "defaultMode": KEY_MODE}}]


def key_mounts(job: ResolvedJob, role: Role) -> list[dict[str, Any]]:
    if not key_volumes(job, role):
        return []
    return [{"name": KEY_VOLUME, "mountPath": KEY_DIR, "readOnly": True}]


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
