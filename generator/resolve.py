"""Resolve a job spec against the catalog: defaults, platform facts, and the rules.

The result, `ResolvedJob`, holds every value the templates print; templates decide only
where values go, never what they are.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any, NamedTuple

from generator.addons import ADDONS_FILE, load_addons
from generator.catalog import (
    DEFAULT_NETWORK,
    Accelerator,
    AcceleratorPool,
    Catalog,
    Cluster,
    Platform,
    Priority,
)
from generator.errors import InvalidInput, Problem
from generator.kinds import KINDS, KindTraits
from generator.names import env_name_problem, env_value_problem
from generator.placement import display_path
from generator.rules import URI, Context, findings
from generator.spec import JobSpec
from generator.specs import LoadedSpec, SpecSource
from generator.units import format_cpus, parse_duration, quantity_value
from generator.yamlio import LineMap, load_document, read_input, refusal
from runtime.identity import Annotation, Env, JobKind, Taint, Workload
from runtime.pods import GpuHost
from runtime.warden.config import TemporalSettings

GIB = Decimal(2**30)


@dataclass(frozen=True)
class Exposure:
    """A Service in front of a job's pods (a DiLoCo synchroniser's, `generator.experiments`)."""

    spec: dict[str, Any]  # the Service's spec


@dataclass(frozen=True)
class Scrape:
    """The platform's Prometheus scraping a role's pods on a named port (a PodMonitor of the
    add-on catalog): its namespace is admitted there by the job's NetworkPolicy."""

    namespace: str
    role: str
    port: str


@dataclass(frozen=True)
class ResolvedJob:
    """A spec with every default and platform fact filled in; the templates' only input."""

    spec: JobSpec
    traits: KindTraits
    source: str
    workload: Workload
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
    labels: dict[str, str]
    annotations: dict[str, str]  # of every object and pod
    object_annotations: dict[str, str]  # of the top-level object: the above, and requests
    priority: Priority
    runtime_env_yaml: str | None
    container_working_dir: str | None
    deadline_seconds: int | None
    ttl_seconds: int | None
    rack_topology_key: str | None
    min_workers: int  # KubeRay may run a preemptible job with fewer workers (seed §4.2)
    # Where Warden's workflows live (its Temporal frontend and namespace, from the add-on
    # catalog): a torchft run sends its shrink requests there (runtime.ft.shrink).
    warden_env: dict[str, str] = field(default_factory=dict)
    # Who scrapes the job's pods' metrics (the add-on catalog's pod_monitors).
    scrapes: tuple[Scrape, ...] = ()
    # Warden's Temporal task queue, where a RayJob's preflight gate sends its results.
    warden_task_queue: str = TemporalSettings.model_fields["task_queue"].default
    # Of one part of an experiment spec (`generator.experiments`): the GKR_* settings its pods
    # get beside their identity, and the Service the job's template renders in front of them.
    gkr_env: dict[str, str] = field(default_factory=dict)
    exposure: Exposure | None = None
    # The Secret of the part's CURVE keys (`gkr diloco keys`), mounted into its pods.
    key_secret: str | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def kind(self) -> str:
        return self.spec.kind

    @property
    def gpu_host(self) -> GpuHost | None:
        return self.accelerator.host if self.accelerator else None

    @property
    def pod_resources(self) -> dict[str, Any]:
        resources: dict[str, Any] = {"cpu": self.cpus, "memory": self.memory}
        return resources | ({self.platform.gpu_resource: self.gpus} if self.gpus else {})

    @property
    def gpu_node_selector(self) -> dict[str, str]:
        assert self.accelerator is not None and self.pool is not None
        labels = self.platform.labels
        return {labels["node_pool"]: self.pool.node_pool,
                labels["accelerator"]: self.accelerator.gke_accelerator,
                labels["machine_type"]: self.accelerator.machine_type}

    @property
    def cpu_node_selector(self) -> dict[str, str]:
        return {self.platform.labels["node_pool"]: self.cluster.head_pool.name}

    @property
    def reservation_toleration(self) -> dict[str, str]:
        """Every pod may run on nodes reserved for its own namespace (seed §4.3)."""
        return {"key": Taint.RESERVED_FOR, "operator": "Equal", "value": self.namespace,
                "effect": "NoSchedule"}

    @property
    def identity_env(self) -> dict[str, str]:
        return (self.workload.env() | {Env.ACCELERATOR: self.spec.accelerator or "none"}
                | self.warden_env | self.gkr_env)

    @property
    def interfaces(self) -> str | None:
        """The GKE multi-network annotation, in interface order: eth0 on GKE's default
        network, then the pool's node networks (an RDMA machine's gVNIC eth1, then its RDMA
        NICs eth2…; a TCPX/TCPXO machine's GPU NICs eth1…)."""
        networks = self.pool.node_networks if self.pool else []
        if not networks:
            return None
        nics = [{"interfaceName": f"eth{i}", "network": network}
                for i, network in enumerate([DEFAULT_NETWORK, *networks])]
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
    namespace = cluster.teams[team].namespace
    annotations = {Annotation.OWNER: spec.owner, Annotation.SOURCE: display}
    workload = Workload(cluster.name, namespace, team, spec.name, JobKind(spec.kind))
    facts = addon_facts(ctx.catalog.root)
    return ResolvedJob(
        spec=spec, traits=KINDS[spec.kind], source=display,
        workload=workload,
        team=team, namespace=namespace, queue=cluster.teams[team].queue,
        cluster=cluster, platform=platform, accelerator=accel, pool=ctx.pool,
        image=ctx.catalog.images.get(spec.image, spec.image),
        gpus=gpus, cpus=cpus, memory=memory,
        head_cpus=format_cpus(spec.head.cpus or head.cpus),
        head_memory=spec.head.memory or head.memory,
        user_env=user_env,
        labels=spec.labels | workload.labels(),
        annotations=annotations,
        object_annotations=annotations | _reservation(spec),
        priority=platform.priorities["preemptible" if spec.preemptible else "normal"],
        runtime_env_yaml=_runtime_env(spec),
        container_working_dir=None if _is_uri(spec.working_dir) else spec.working_dir,
        deadline_seconds=parse_duration(spec.deadline) if spec.deadline else None,
        ttl_seconds=parse_duration(spec.ttl) if spec.ttl else None,
        rack_topology_key=(platform.topology[spec.rack_affinity.level]
                           if spec.rack_affinity else None),
        min_workers=0 if spec.preemptible else spec.pods,
        warden_env=dict(facts.warden_env), scrapes=facts.scrapes,
        warden_task_queue=facts.warden_task_queue,
    )


class AddonFacts(NamedTuple):
    """What a job's pods take from the add-on catalog."""

    # Warden's Temporal frontend and namespace as pods read them (GKR_TEMPORAL_*): the
    # service `warden.temporal` names and Warden's own settings.
    warden_env: dict[str, str]
    # Warden's task queue (`warden.settings.temporal`), where a preflight gate reports.
    warden_task_queue: str
    # The PodMonitors of the platform's Prometheus (warden.prometheus).
    scrapes: tuple[Scrape, ...]


def addon_facts(root: Path) -> AddonFacts:
    stat = (root / ADDONS_FILE).stat()
    return _addon_facts(root, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=16)
def _addon_facts(root: Path, *_version: int) -> AddonFacts:  # read once per file version
    addons = load_addons(root)
    temporal = {**TemporalSettings().model_dump(), **addons.warden.settings.get("temporal", {})}
    prometheus = addons.addons[addons.warden.prometheus.addon]
    return AddonFacts(
        {Env.TEMPORAL_ADDRESS: addons.address(addons.warden.temporal),
         Env.TEMPORAL_NAMESPACE: str(temporal["namespace"])},
        str(temporal["task_queue"]),
        tuple(Scrape(prometheus.namespace, row.role, row.port)
              for _, row in sorted(prometheus.pod_monitors.items())))


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
    try:
        data, lines, display = _env_file(spec.env_file, source)
    except InvalidInput as error:
        problems.extend(error.problems)
        return dict(spec.env)
    if data is not None and not isinstance(data, dict):
        problems.append(Problem(display, 1, "", "an env file maps NAME: \"string value\""))
        return dict(spec.env)
    for name, value in (data or {}).items():
        why = env_name_problem(name) or env_value_problem(value)
        if why is not None:
            problems.append(Problem(display, lines.get((name,)), str(name), why))
    return {**(data or {}), **spec.env}


def _env_file(value: str, source: SpecSource) -> tuple[Any, LineMap, str]:
    """Read the env file a spec names. From a spec file it is a relative path that stays in
    the repository (its values land in committed manifests); a file named with --env on the
    command line may be anywhere."""
    from_flags = "env_file" in source.flags
    root = source.root or Path.cwd()
    if not from_flags and (source.path is None or Path(value).is_absolute()):
        raise InvalidInput([source.problem(("env_file",), (
            f"{value!r}: an env file is a path relative to the spec file, inside the "
            "repository"))])
    path = Path(value) if source.path is None else source.path.parent / value
    display = display_path(path, root)
    why = refusal(path, root, anywhere=from_flags)
    if why is not None:
        raise InvalidInput([source.problem(("env_file",), f"{value!r}: {why}")])
    data, lines = load_document(display, read_input(path, root, display, anywhere=from_flags))
    return data, lines, display


def _reservation(spec: JobSpec) -> dict[str, str]:
    """Asks Warden to keep a finished RayJob's nodes for its namespace a while (seed §4.3)."""
    if not spec.relaunch_reservation:
        return {}
    seconds = parse_duration(spec.relaunch_reservation)
    return {Annotation.RELAUNCH_RESERVATION_SECONDS: str(seconds)}


def _is_uri(value: str | None) -> bool:
    return bool(value and URI.fullmatch(value))


def _runtime_env(spec: JobSpec) -> str | None:
    """Ray runtime_env: a remote working_dir is fetched by Ray on every node."""
    if not _is_uri(spec.working_dir):
        return None
    runtime_env: dict[str, Any] = {"working_dir": spec.working_dir}
    return json.dumps(runtime_env, sort_keys=True)
