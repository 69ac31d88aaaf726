"""Render one resolved job into Kubernetes manifests (dicts) through Jinja2 templates.

Templates print values with `tojson`, so the YAML they produce is parsed back into data
without any chance of a value changing the structure; pod templates are rendered once per
role and embedded as data.
"""

from __future__ import annotations

import json
import shlex
from functools import cache
from typing import Any

import jinja2

from generator.resolve import ResolvedJob
from generator.units import parse_duration
from generator.yamlio import load_all_rendered, load_rendered

# Ray's default head ports: GCS, dashboard (job submission), client.
RAY_HEAD_PORTS = [
    {"name": "gcs", "containerPort": 6379},
    {"name": "dashboard", "containerPort": 8265},
    {"name": "client", "containerPort": 10001},
]
SENTINEL_RESOURCES = {"cpu": "100m", "memory": "128Mi"}


@cache
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("generator", "templates"),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
    )
    env.filters["tojson"] = lambda value: json.dumps(value, ensure_ascii=False)
    env.filters["combine"] = lambda left, right: {**left, **right}
    return env


class _Embeds:
    """Sub-documents placed by templates as tokens and swapped in after parsing.

    `{{ embed(value) }}` prints a token instead of serialising a structured value (a pod,
    an env list, a catalog sidecar), so the (slow, pure-Python) YAML constructor parses only
    the template's own structure.
    """

    def __init__(self) -> None:
        self.objects: dict[str, Any] = {}

    def __call__(self, value: Any) -> str:
        token = f"@gkr-embed-{len(self.objects)}@"
        # A JSON round trip is a fast deep copy: documents never share objects with the
        # catalog or with each other.
        self.objects[token] = json.loads(json.dumps(value))
        return json.dumps(token)

    def substitute(self, node: Any) -> Any:
        if isinstance(node, str):
            return self.objects.get(node, node)
        if isinstance(node, dict):
            return {key: self.substitute(value) for key, value in node.items()}
        if isinstance(node, list):
            return [self.substitute(value) for value in node]
        return node


def _render(name: str, values: dict[str, Any]) -> str:
    return environment().get_template(name).render(**values)


def render_template(name: str, **values: Any) -> Any:
    """One YAML document from a template, as data."""
    embeds = _Embeds()
    return embeds.substitute(load_rendered(_render(name, {**values, "embed": embeds})))


def render_documents(name: str, **values: Any) -> list[dict[str, Any]]:
    """Every YAML document of a template, as data."""
    embeds = _Embeds()
    documents = load_all_rendered(_render(name, {**values, "embed": embeds}))
    return [embeds.substitute(document) for document in documents]


def render_job(job: ResolvedJob) -> list[dict[str, Any]]:
    """The manifests of one job, in apply order."""
    kueue = job.platform.kueue
    values: dict[str, Any] = {
        "job": job,
        "kueue_labels": {kueue["queue_label"]: job.queue,
                         kueue["priority_label"]: job.priority.priority_class},
    }
    if job.kind == "job":
        values["pod"] = _pod(job, "job", "main", command=shlex.split(job.spec.cmd or ""))
    else:
        values["ray_cluster_spec"] = _ray_cluster_spec(job)
    if job.kind == "raycluster":
        values["sentinel_pod"] = _sentinel_pod(job)
    if job.kind == "rayjob":
        values["reservation"] = _reservation(job)
    return render_documents(f"{job.kind}.yaml.j2", **values)


def _ray_cluster_spec(job: ResolvedJob) -> dict[str, Any]:
    head = _pod(job, "head", "ray-head", ports=RAY_HEAD_PORTS,
                resources={"cpu": job.head_cpus, "memory": job.head_memory})
    worker = _pod(job, "worker", "ray-worker")
    return render_template("ray_cluster_spec.yaml.j2", job=job, head_pod=head, worker_pod=worker)


def _sentinel_pod(job: ResolvedJob) -> dict[str, Any]:
    address = f"{job.name}-head-svc.{job.namespace}.svc.cluster.local:6379"
    command = ["python", "-m", "runtime.sentinel", "--address", address]
    return _pod(job, "sentinel", "sentinel", command=command, resources=SENTINEL_RESOURCES)


def _reservation(job: ResolvedJob) -> dict[str, str]:
    """Annotation read by the platform to keep a finished RayJob's nodes for its namespace."""
    duration = job.spec.relaunch_reservation
    if not duration:
        return {}
    return {"gkr.dev/relaunch-reservation-seconds": str(parse_duration(duration))}


def _pod(
    job: ResolvedJob,
    role: str,
    container_name: str,
    *,
    command: list[str] | None = None,
    ports: list[dict[str, Any]] | None = None,
    resources: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return render_template(
        "pod.yaml.j2", job=job, role=role, container_name=container_name, command=command,
        ports=ports, resources=resources or _pod_resources(job),
    )


def _pod_resources(job: ResolvedJob) -> dict[str, Any]:
    resources: dict[str, Any] = {"cpu": job.cpus, "memory": job.memory}
    if job.gpus:
        resources[job.platform.gpu_resource] = job.gpus
    return resources

