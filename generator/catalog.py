"""The catalog: the single source of truth for platform facts.

* `clusters/<name>.yaml`: one cluster (project, region, accelerator node pools on
  reservations, the CPU pool for Ray heads, team namespaces and queues);
* `platform/catalog/accelerators.yaml`: every hardware fact a pod depends on;
* `platform/catalog/images.yaml`: friendly image names pinned to digests;
* `platform/catalog/gke.yaml`: label keys, priority tiers and other platform-wide facts.
"""

from __future__ import annotations

import re
from functools import cached_property
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from generator.cache import digest, load_pickle, store_pickle
from generator.errors import InvalidInput, Problem
from generator.problems import problems_from_validation
from generator.units import CpuCount, Quantity, quantity_value
from generator.yamlio import FieldPath, LineMap, line_of, load_document
from runtime.pods import GpuHost

PARSE_CACHE = ".gkr/cache/catalog"
GpuStack = Literal["tcpx", "tcpxo", "rdma"]
DNS_LABEL = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
PINNED_IMAGE = r"^[^@\s]+@sha256:[0-9a-f]{64}$"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class Resources(_Model):
    cpus: CpuCount = Field(gt=0)
    """CPUs."""
    memory: Quantity
    """Memory, a Kubernetes quantity."""


class Accelerator(_Model):
    """One accelerator type and everything its pods need (seed §3.1)."""

    description: str
    """What the machine is, for humans."""
    gke_accelerator: str
    """Value of the GKE accelerator node label."""
    machine_type: str
    """Compute Engine machine type of the node."""
    gpus_per_node: int = Field(gt=0)
    """GPUs per node."""
    allocatable: Resources
    """CPU and memory that pods can request on one node."""
    gpudirect: Literal["none"] | GpuStack
    """GPUDirect network stack of the machine family."""
    gpu_nics: int = Field(ge=0)
    """Extra GPU NICs (eth1…ethN), each on its own VPC network."""
    shm_size: Quantity
    """Size of the in-memory /dev/shm that NCCL needs."""
    tolerations: list[dict[str, Any]]
    """Tolerations for the accelerator's node taints."""
    plugin_paths: list[str]
    """Library directories that must exist in the pod (checked by the preflight)."""
    volumes: list[dict[str, Any]]
    """Pod volumes: driver libraries, NCCL plugins, host devices."""
    volume_mounts: list[dict[str, Any]]
    """Mounts of those volumes into the training container."""
    env: dict[str, str]
    """NCCL and library variables of the training container."""
    annotations: dict[str, str]
    """Static pod annotations (device lists of sidecars)."""
    sidecars: list[dict[str, Any]]
    """Native sidecars (init containers with restartPolicy Always), e.g. the TCPXO daemon."""

    @cached_property
    def host(self) -> GpuHost:
        """What every pod on this accelerator's nodes needs (job pods and node checks alike)."""
        return GpuHost(gpus=self.gpus_per_node, shm_size=self.shm_size,
                       tolerations=self.tolerations, annotations=self.annotations,
                       volumes=self.volumes, volume_mounts=self.volume_mounts,
                       sidecars=self.sidecars, env=self.env, plugin_paths=self.plugin_paths)

    @property
    def stack(self) -> GpuStack | None:
        """The GPUDirect network stack, if the machine has one."""
        return None if self.gpudirect == "none" else self.gpudirect

    @property
    def pod_allocatable(self) -> Resources:
        """What the training container may ask: allocatable minus the sidecars' requests."""
        requests = [s.get("resources", {}).get("requests", {}) for s in self.sidecars]
        cpus = sum(float(quantity_value(str(r.get("cpu", 0)))) for r in requests)
        memory = sum(quantity_value(str(r.get("memory", 0))) for r in requests)
        free = quantity_value(self.allocatable.memory) - memory
        return Resources(cpus=self.allocatable.cpus - cpus, memory=f"{int(free / 2**30)}Gi")


class HeadPool(_Model):
    """The CPU-only node pool that hosts Ray heads."""

    name: str
    """GKE node pool name."""
    machine_type: str
    """Machine type of the pool's nodes."""
    nodes: int = Field(gt=0)
    """Node count."""
    allocatable: Resources
    """What one node can give to pods."""
    head_defaults: Resources
    """Ray head resources when a spec gives none."""


class AcceleratorPool(_Model):
    """A node pool of one accelerator type in one cluster."""

    node_pool: str = Field(pattern=DNS_LABEL)
    """GKE node pool name."""
    nodes: int = Field(gt=0)
    """Node count (the reservation's size)."""
    zone: str
    """Zone of the pool."""
    reservation: str
    """Future reservation the pool consumes (seed §3.1)."""
    compact_placement: bool = False
    """Compact placement policy for the pool."""
    gpu_networks: list[str] = Field(default_factory=list)
    """VPC network names of the GPU NICs, in NIC order (eth1, eth2, …)."""


class Team(_Model):
    namespace: str = Field(pattern=DNS_LABEL)
    """Kubernetes namespace of the team."""
    queue: str = Field(pattern=DNS_LABEL)
    """Kueue LocalQueue name in that namespace."""
    group: str | None = None
    """Google group whose members may run jobs in the namespace (RBAC); none: no binding."""


class Cluster(_Model):
    """One GKE cluster: clusters/<name>.yaml."""

    name: str = Field(pattern=DNS_LABEL)
    """Cluster name; equals the file name."""
    project: str
    """GCP project."""
    region: str
    """GCP region."""
    zones: list[str] = Field(min_length=1)
    """Zones of the cluster's node pools."""
    kube_context: str
    """kubeconfig context used by `gkr submit` and friends."""
    head_pool: HeadPool
    """CPU pool for Ray heads."""
    accelerators: dict[str, AcceleratorPool]
    """Accelerator types offered, with their node pools."""
    teams: dict[str, Team] = Field(min_length=1)
    """Teams allowed on the cluster: folder name under jobs/ → namespace and queue."""
    code_store: str | None = Field(None, pattern=r"^(gs|s3|file)://\S+$")
    """Where `gkr submit` uploads packaged working directories (gs://, s3:// or file://)."""

    def team_of_namespace(self, namespace: str) -> str | None:
        return next((t for t, team in self.teams.items() if team.namespace == namespace), None)


class Priority(_Model):
    priority_class: str = Field(pattern=DNS_LABEL)
    """Kubernetes PriorityClass and Kueue WorkloadPriorityClass name."""
    value: int
    """Priority value (higher wins)."""
    description: str
    """What the tier is for."""


class NodeCheckPolicy(_Model):
    namespace: str = Field(pattern=DNS_LABEL)
    """Namespace of the check Jobs (Warden's, so `gkr check` and Warden share them)."""
    privileged: bool
    """Check pods run privileged, to read the kernel log for Xid/ECC errors (seed §2.4)."""


class Platform(_Model):
    """Platform-wide facts: platform/catalog/gke.yaml."""

    labels: dict[Literal["accelerator", "machine_type", "node_pool", "hostname"], str]
    """Node label keys GKE sets."""
    gpu_resource: str
    """Extended resource name of GPUs."""
    topology: dict[Literal["block", "subblock", "host"], str]
    """GKE topology label per rack-affinity level."""
    kueue: dict[Literal["queue_label", "priority_label"], str]
    """Kueue label keys."""
    priorities: dict[Literal["normal", "preemptible"], Priority]
    """The two scheduling tiers."""
    kubernetes_version: str = Field(pattern=r"^1\.\d+\.\d+$")
    """Kubernetes version whose OpenAPI schemas rendered manifests are validated against."""
    node_checks: NodeCheckPolicy
    """Where and how node checks (`gkr check`, Warden) run."""


class Images(_Model):
    images: dict[str, str]
    """Friendly name → image pinned to a digest."""

    @model_validator(mode="after")
    def _pinned(self) -> Images:
        for name, ref in self.images.items():
            if not re.match(PINNED_IMAGE, ref):
                raise ValueError(f"image {name!r} must be pinned: repository@sha256:<64 hex>")
        return self


class Accelerators(_Model):
    accelerators: dict[str, Accelerator]
    """Accelerator name → facts."""


M = TypeVar("M", bound=BaseModel)


def load_model(model: type[M], path: Path, root: Path) -> tuple[M, LineMap]:
    """Load a YAML file into a model; errors name the file, line and field."""
    display = _display(path, root)
    if not path.is_file():
        raise InvalidInput([Problem(display, None, "", "file not found")])
    data, lines = _parsed(path, display, root)
    try:
        return model.model_validate(data or {}), lines
    except ValidationError as error:
        raise InvalidInput(problems_from_validation(error, display, lines, model)) from None


def _parsed(path: Path, display: str, root: Path) -> tuple[Any, LineMap]:
    """ruamel's parse (with line numbers) of a catalog file, memoised on disk by content:
    catalog files are read on every render, and ruamel's pure-Python parser is slow."""
    text = path.read_bytes()
    memo = root / PARSE_CACHE / f"{digest(display.encode(), text)}.pickle"
    parsed = load_pickle(memo)
    if parsed is None:
        parsed = load_document(path, display, text.decode("utf-8"))
        store_pickle(memo, parsed)
    return parsed


def _display(path: Path, root: Path) -> str:
    return path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)


class Catalog:
    """All catalog files of a repository, loaded lazily and once."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @cached_property
    def platform(self) -> Platform:
        return load_model(Platform, self.root / "platform/catalog/gke.yaml", self.root)[0]

    @cached_property
    def accelerators(self) -> dict[str, Accelerator]:
        path = self.root / "platform/catalog/accelerators.yaml"
        return load_model(Accelerators, path, self.root)[0].accelerators

    @cached_property
    def images(self) -> dict[str, str]:
        return load_model(Images, self.root / "platform/catalog/images.yaml", self.root)[0].images

    @cached_property
    def clusters(self) -> dict[str, Cluster]:
        clusters, problems = {}, []
        for path in sorted((self.root / "clusters").glob("*.yaml")):
            cluster, lines = load_model(Cluster, path, self.root)
            problems += [
                Problem(_display(path, self.root), line_of(lines, field), ".".join(map(str, field)),
                        message)
                for field, message in self._cluster_problems(cluster, path.stem)
            ]
            clusters[cluster.name] = cluster
        if problems:
            raise InvalidInput(problems)
        return clusters

    def _cluster_problems(self, cluster: Cluster, stem: str) -> list[tuple[FieldPath, str]]:
        """Cross-file rules: names, offered accelerators, one GPU network per GPU NIC."""
        found: list[tuple[FieldPath, str]] = []
        if cluster.name != stem:
            found.append((("name",), f"must equal the file name {stem!r}"))
        for name, pool in cluster.accelerators.items():
            accelerator = self.accelerators.get(name)
            if accelerator is None:
                known = ", ".join(sorted(self.accelerators))
                found.append((("accelerators", name), f"unknown accelerator; known: {known}"))
            elif len(pool.gpu_networks) != accelerator.gpu_nics:
                found.append((("accelerators", name, "gpu_networks"),
                              f"{name} nodes have {accelerator.gpu_nics} GPU NICs: list exactly "
                              f"{accelerator.gpu_nics} networks"))
        return found

    def load_all(self) -> None:
        """Parse every catalog file now (before forking render workers)."""
        _ = self.platform, self.accelerators, self.images, self.clusters

    def files(self) -> list[Path]:
        """Every catalog file, for cache keys and change detection."""
        catalog = sorted((self.root / "platform/catalog").glob("*.yaml"))
        return catalog + sorted((self.root / "clusters").glob("*.yaml"))
