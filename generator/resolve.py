"""Resolve a job spec against the catalog: defaults, platform facts, and the rules.

The result, `ResolvedJob`, holds every value the templates print; templates decide only
where values go, never what they are.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from generator.catalog import Accelerator, AcceleratorPool, Catalog, Cluster, Platform, Priority
from generator.errors import InvalidInput, Problem
from generator.rules import URI, Context, findings
from generator.spec import JobSpec
from generator.specs import LoadedSpec
from generator.units import format_cpus, parse_duration, quantity_value
from generator.yamlio import load_document

GIB = Decimal(2**30)


@dataclass(frozen=True)
class ResolvedJob:
    """A spec with every default and platform fact filled in; the templates' only input."""

    spec: JobSpec
    source: str
    team: str
    namespace: str
    queue: str
    cluster: Cluster
    platform: Platform
    accelerator: Accelerator | None
    pool: AcceleratorPool | None
    image: str
    gpus: int
    cpus: str | int
    memory: str
    head_cpus: str | int
    head_memory: str
    user_env: dict[str, str]
    env: list[dict[str, str]]
    gpu_env: list[dict[str, str]]
    labels: dict[str, str]
    annotations: dict[str, str]
    priority: Priority
    runtime_env_yaml: str | None
    container_working_dir: str | None
    deadline_seconds: int | None
    ttl_seconds: int | None
    rack_topology_key: str | None

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def kind(self) -> str:
        return self.spec.kind

    @property
    def interfaces(self) -> str | None:
        """The GKE multi-network annotation: eth0 on the default VPC, then one NIC per GPU VPC."""
        if not self.pool or not self.pool.gpu_networks:
            return None
        nics = [{"interfaceName": "eth0", "network": "default"}] + [
            {"interfaceName": f"eth{i}", "network": network}
            for i, network in enumerate(self.pool.gpu_networks, start=1)
        ]
        return json.dumps(nics, separators=(",", ":"))


def resolve(loaded: LoadedSpec, catalog: Catalog) -> ResolvedJob:
    """Check the rules, then fill defaults; raises InvalidInput with every problem found."""
    spec, source = loaded.spec, loaded.source
    stem = source.path.stem if source.path else None
    ctx = Context(spec, source.team, stem, catalog)
    problems = [source.problem(field, message) for field, message in findings(ctx)]
    env = _environment(loaded, problems)
    if problems:
        raise InvalidInput(problems)
    assert ctx.cluster is not None  # the rules above guarantee it
    return _fill(ctx, source.display, env)


def assemble(
    spec: JobSpec, team: str | None, display: str, user_env: dict[str, str], catalog: Catalog
) -> ResolvedJob:
    """Rebuild a job whose spec already passed the rules against this very catalog (used by
    the render cache, which stores specs, not the catalog objects they point to)."""
    return _fill(Context(spec, team, None, catalog), display, user_env)


def _fill(ctx: Context, display: str, user_env: dict[str, str]) -> ResolvedJob:
    spec, cluster, accel = ctx.spec, ctx.cluster, ctx.accelerator
    assert cluster is not None
    team = ctx.team or cluster.team_of_namespace(spec.namespace or "") or ""
    gpus = spec.gpus if spec.gpus is not None else (accel.gpus_per_node if accel else 0)
    cpus, memory = _pod_size(spec, cluster, accel, gpus)
    head = cluster.head_pool.head_defaults
    platform = ctx.catalog.platform
    return ResolvedJob(
        spec=spec, source=display, team=team,
        namespace=cluster.teams[team].namespace, queue=cluster.teams[team].queue,
        cluster=cluster, platform=platform, accelerator=accel, pool=ctx.pool,
        image=ctx.catalog.images.get(spec.image, spec.image),
        gpus=gpus, cpus=cpus, memory=memory,
        head_cpus=format_cpus(spec.head.cpus or head.cpus),
        head_memory=spec.head.memory or head.memory,
        user_env=user_env,
        env=_env_list(spec, cluster, None, user_env),
        gpu_env=_env_list(spec, cluster, accel, user_env),
        labels=_labels(spec, team),
        annotations={"gkr.dev/owner": spec.owner, "gkr.dev/source": display},
        priority=platform.priorities["preemptible" if spec.preemptible else "normal"],
        runtime_env_yaml=_runtime_env(spec),
        container_working_dir=None if _is_uri(spec.working_dir) else spec.working_dir,
        deadline_seconds=parse_duration(spec.deadline) if spec.deadline else None,
        ttl_seconds=parse_duration(spec.ttl) if spec.ttl else None,
        rack_topology_key=(platform.topology[spec.rack_affinity.level]
                           if spec.rack_affinity else None),
    )


def _pod_size(
    spec: JobSpec, cluster: Cluster, accel: Accelerator | None, gpus: int
) -> tuple[str | int, str]:
    """Per-pod CPU and memory: as asked, else the node's share in proportion to the GPUs."""
    if accel is None:
        default_cpus = cluster.head_pool.head_defaults.cpus
        default_memory = cluster.head_pool.head_defaults.memory
    else:
        share, usable = Decimal(gpus) / accel.gpus_per_node, accel.pod_allocatable
        default_cpus = math.floor(usable.cpus * float(share))
        gib = quantity_value(usable.memory) * share / GIB
        default_memory = f"{math.floor(gib)}Gi"
    return format_cpus(spec.cpus or default_cpus), spec.memory or default_memory


def _environment(loaded: LoadedSpec, problems: list[Problem]) -> dict[str, str]:
    """The env_file's variables under the spec's own `env` (which wins)."""
    spec, source = loaded.spec, loaded.source
    if not spec.env_file:
        return dict(spec.env)
    base = source.path.parent if source.path else None
    path = (base / spec.env_file) if base else None
    if path is None or not path.is_file():
        problems.append(source.problem(("env_file",), f"{spec.env_file!r} not found"))
        return dict(spec.env)
    try:
        data, _ = load_document(path, str(path))
    except InvalidInput as error:
        problems.extend(error.problems)
        return dict(spec.env)
    if not isinstance(data, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in data.items()
    ):
        problems.append(Problem(str(path), 1, "", "an env file maps NAME: \"string value\""))
        return dict(spec.env)
    return {**data, **spec.env}


def _env_list(
    spec: JobSpec, cluster: Cluster, accel: Accelerator | None, user: dict[str, str]
) -> list[dict[str, str]]:
    """Accelerator defaults, then the user's variables, then GKR's identity; sorted by name."""
    env = {**(accel.env if accel else {}), **user}
    env |= {
        "GKR_JOB": spec.name, "GKR_KIND": spec.kind, "GKR_CLUSTER": cluster.name,
        "GKR_ACCELERATOR": spec.accelerator or "none",
    }
    return [{"name": name, "value": env[name]} for name in sorted(env)]


def _labels(spec: JobSpec, team: str) -> dict[str, str]:
    return {
        **spec.labels,
        "app.kubernetes.io/managed-by": "gkr",
        "gkr.dev/job": spec.name,
        "gkr.dev/kind": spec.kind,
        "gkr.dev/team": team,
    }


def _is_uri(value: str | None) -> bool:
    return bool(value and URI.match(value))


def _runtime_env(spec: JobSpec) -> str | None:
    """Ray runtime_env: a remote working_dir is fetched by Ray on every node."""
    if not _is_uri(spec.working_dir):
        return None
    runtime_env: dict[str, Any] = {"working_dir": spec.working_dir}
    return json.dumps(runtime_env, sort_keys=True)
