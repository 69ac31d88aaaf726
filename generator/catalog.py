"""The catalog: the single source of truth for platform facts.

* `clusters/<name>.yaml`: one cluster (project, region, accelerator node pools on
  reservations, the CPU pool for Ray heads, team namespaces and queues);
* `platform/catalog/accelerators.yaml`: every hardware fact a pod depends on;
* `platform/catalog/images.yaml`: friendly image names pinned to digests;
* `platform/catalog/gke.yaml`: label keys, priority tiers and other platform-wide facts.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from decimal import Decimal
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from generator.errors import InvalidInput, Problem
from generator.names import label_value_problem
from generator.problems import problems_from_validation
from generator.telemetry import Telemetry
from generator.units import CpuCount, Duration, Quantity, quantity_value
from generator.yamlio import FieldPath, LineMap, line_of, load_document, read_input, refusal
from runtime.pods import GpuHost

GpuStack = Literal["tcpx", "tcpxo", "rdma"]
# GKENetworkParamSet deviceMode values GKR uses (GKE's CRD also has DPDK-VFIO).
DeviceMode = Literal["NetDevice", "RDMA"]
NetworkLayout = Literal["vpc_per_nic", "roce_vpc"]  # a VPC per NIC, or subnets of one RoCE VPC
DNS_LABEL = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
# A pod network: a Network object's name, and part of its VPC's and subnet's names.
NetworkName = Annotated[str, Field(pattern=DNS_LABEL)]
DEFAULT_NETWORK = "default"  # eth0's network, GKE's own: no pool may name it
PINNED_IMAGE = r"^[^@\s]+@sha256:[0-9a-f]{64}$"
# An upstream image by tag (a `latest` or missing tag is not allowed: it pins nothing).
TAGGED_IMAGE = r"^[^@\s:]+(:[0-9]+)?/[^@\s:]+:(?!latest$)[\w][\w.-]{0,127}$"
ACCELERATORS_FILE = "platform/catalog/accelerators.yaml"
IMAGES_FILE = "platform/catalog/images.yaml"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class Resources(_Model):
    cpus: CpuCount = Field(gt=0)
    """CPUs."""
    memory: Quantity
    """Memory, a Kubernetes quantity."""


class PreflightFacts(_Model):
    """What the preflight that gates a RayJob (runtime.preflight.gate) asks of this
    accelerator's pods: the all-reduce between them at least this fast."""

    min_busbw_gbps: float = Field(gt=0, allow_inf_nan=False)
    """Least all-reduce bus bandwidth between the job's pods, GB/s, as NVIDIA nccl-tests
    define it: busbw = algbw * 2(n-1)/n over n ranks (doc/PERFORMANCE.md,
    https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md)."""
    message_mib: float = Field(256.0, gt=0, le=4096)
    """All-reduce buffer per rank, MiB, at which the threshold holds (bandwidth falls with
    smaller messages)."""


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
    peak_tflops: float = Field(gt=0, allow_inf_nan=False)
    """Dense bf16 Tensor Core peak of one GPU, TFLOP/s (NVIDIA's datasheet figure without
    sparsity); GPU job pods get it as GKR_PEAK_TFLOPS, the runtime's MFU denominator."""
    allocatable: Resources
    """CPU and memory that pods can request on one node."""
    gpudirect: Literal["none"] | GpuStack
    """GPUDirect network stack of the machine family."""
    gpu_nics: int = Field(ge=0)
    """GPU NICs, each on a network of its own: eth1…ethN, or eth2… after the gVNIC eth1 of
    a stack that has one (network_stacks)."""
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
    preflight: PreflightFacts
    """The gate's all-reduce threshold for jobs on this accelerator."""
    nccl_inspector_plugin: str | None = Field(None, pattern=r"^/\S+\.so$")
    """Path in the training image of the NCCL Inspector profiler plugin (built for the NCCL
    that the accelerator's pods load); None: GPU pods record no NCCL Inspector data."""

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


class NetworkStack(_Model):
    """The NICs past eth0 of one GPUDirect stack, and their VPC networks."""

    layout: NetworkLayout
    """GPU NICs on one VPC each, or on the subnets of one VPC with the zone's RoCE profile."""
    mtu: int = Field(ge=1460, le=8896)
    """MTU of the stack's VPC networks."""
    device_mode: DeviceMode
    """GKENetworkParamSet deviceMode of the GPU NICs' networks."""
    gvnic: bool
    """eth1 is a gVNIC on a VPC of its own, before the GPU NICs (A3 Ultra, A4, A4X)."""

    @property
    def host_interfaces(self) -> list[str]:
        """The interfaces that are no GPU NIC: eth0, and the gVNIC's."""
        return ["eth0", "eth1"] if self.gvnic else ["eth0"]


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
    gvnic_network: NetworkName | None = None
    """Network of the gVNIC eth1, where the stack has one (GKE's examples: gvnic-1)."""
    gpu_networks: list[NetworkName] = Field(default_factory=list)
    """Networks of the GPU NICs, in NIC order (after the gVNIC's where there is one)."""

    @property
    def node_networks(self) -> list[str]:
        """The networks of eth1, eth2, … in interface order (the node pool's additional node
        networks, and the pods' interfaces after eth0)."""
        return ([self.gvnic_network] if self.gvnic_network else []) + self.gpu_networks


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
    raycluster_idle_after: Duration = "8h"
    """A persistent RayCluster that runs no job this long holds its capacity for nothing:
    its sentinel tells the owner (runtime.sentinel)."""

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


class Agent(_Model):
    """The agent `gkr diagnose` runs on a failed run's crash bundle (seed §7.4)."""

    command: list[str] = Field(default_factory=list)
    """Its argv; `{prompt}` and `{workspace}` stand for their paths, and the prompt is also on
    its stdin. Empty: none configured ($GKR_AGENT_COMMAND or `--agent` give one)."""
    env: list[str] = Field(default_factory=list)
    """Variables passed from your environment to a local agent (its API key); it gets no
    other but PATH, the locale and the telemetry DSN."""
    timeout_s: int = Field(3600, gt=0, le=86400)
    """Time the agent may take; then it is stopped."""
    image: str
    """The in-cluster Job's image: a name in images.yaml (it holds gkr and the agent)."""
    secret: str | None = Field(None, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
    """Secret in the team namespace whose keys become the in-cluster agent's environment (its
    API key), created outside Git; None: none."""
    cpus: CpuCount = Field(2.0, gt=0)
    """CPUs of the in-cluster Job."""
    memory: Quantity = "8Gi"
    """Memory of the in-cluster Job."""


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
    telemetry: Telemetry
    """Where GPU jobs' collective telemetry goes: ClickHouse and the node dump folder."""
    agent: Agent
    """The diagnosing agent of failed runs (`gkr diagnose`)."""
    ray_operator_namespace: str = Field(pattern=DNS_LABEL)
    """Namespace of the KubeRay operator, which reads every Ray head's dashboard (a RayJob's
    status); each job's NetworkPolicy admits it there. Equals the kuberay-operator add-on's
    (`gkr render` refuses a difference)."""


class Images(_Model):
    images: dict[str, str]
    """Friendly name → image: pinned to a digest (the platform's own, or an upstream image
    that `gkr images pin` resolved), or an upstream image by tag until it is pinned. The
    provenance of every digest is in platform/catalog/images.lock (generator.images)."""
    builds: dict[str, str] = Field(default_factory=dict)
    """Name → the stage of platform/images/Containerfile that `gkr images build` builds."""

    @model_validator(mode="after")
    def _pinned(self) -> Images:
        for name, ref in self.images.items():
            if name in self.builds and not re.fullmatch(PINNED_IMAGE, ref):
                raise ValueError(f"image {name!r} is built here, so it must be pinned: "
                                 "repository@sha256:<64 hex>")
            if not re.fullmatch(PINNED_IMAGE, ref) and not re.fullmatch(TAGGED_IMAGE, ref):
                raise ValueError(f"image {name!r}: {ref!r} is neither repository@sha256:<64 hex> "
                                 "nor an upstream repository:tag")
        for name in sorted(set(self.builds) - set(self.images)):
            raise ValueError(f"builds.{name} names no image of `images`")
        return self


class Accelerators(_Model):
    network_stacks: dict[GpuStack, NetworkStack]
    """GPUDirect stack → its NICs and networks."""
    accelerators: dict[str, Accelerator]
    """Accelerator name → facts."""


M = TypeVar("M", bound=BaseModel)


def load_model(model: type[M], path: Path, root: Path) -> tuple[M, LineMap]:
    """Load a YAML file into a model; errors name the file, line and field."""
    display = _display(path, root)
    data, lines = load_document(display, read_input(path, root, display))
    try:
        return model.model_validate(data or {}), lines
    except ValidationError as error:
        raise InvalidInput(problems_from_validation(error, display, lines, model)) from None


def _display(path: Path, root: Path) -> str:
    return path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)


def _located(display: str, lines: LineMap, found: list[tuple[FieldPath, str]]) -> list[Problem]:
    return [Problem(display, line_of(lines, field), ".".join(map(str, field)), message)
            for field, message in found]


# GPUs of each Compute Engine GPU machine type (Compute Engine documentation, "GPU machine
# types" and "Accelerator-optimized machine family": A2, A3, A4, A4X and G2 series). An
# accelerator's gpus_per_node must agree with its machine type.
GCE_GPUS: dict[str, int] = {
    "a2-highgpu-1g": 1, "a2-highgpu-2g": 2, "a2-highgpu-4g": 4, "a2-highgpu-8g": 8,
    "a2-megagpu-16g": 16,
    "a2-ultragpu-1g": 1, "a2-ultragpu-2g": 2, "a2-ultragpu-4g": 4, "a2-ultragpu-8g": 8,
    "a3-highgpu-1g": 1, "a3-highgpu-2g": 2, "a3-highgpu-4g": 4, "a3-highgpu-8g": 8,
    "a3-edgegpu-8g": 8, "a3-megagpu-8g": 8, "a3-ultragpu-8g": 8,
    "a4-highgpu-8g": 8, "a4x-highgpu-4g": 4,
    "g2-standard-4": 1, "g2-standard-8": 1, "g2-standard-12": 1, "g2-standard-16": 1,
    "g2-standard-24": 2, "g2-standard-32": 1, "g2-standard-48": 4, "g2-standard-96": 8,
}
Finding = tuple[FieldPath, str]


def check_machine_gpus(accelerator: Accelerator, stack: NetworkStack | None) -> Iterator[Finding]:
    known = GCE_GPUS.get(accelerator.machine_type)
    if known is None:
        yield ("machine_type",), (f"{accelerator.machine_type!r} is not a GPU machine type gkr "
                                  f"knows; known: {', '.join(sorted(GCE_GPUS))}")
    elif known != accelerator.gpus_per_node:
        yield ("gpus_per_node",), (f"{accelerator.gpus_per_node}, but a "
                                   f"{accelerator.machine_type} has {known} GPUs")


def _sidecar_requests(accelerator: Accelerator) -> Iterator[tuple[FieldPath, str, object]]:
    """Every (field, resource, value) of the sidecars' requests."""
    for index, sidecar in enumerate(accelerator.sidecars):
        resources = sidecar.get("resources") or {}
        requests = resources.get("requests") or {} if isinstance(resources, dict) else {}
        for resource, value in (requests.items() if isinstance(requests, dict) else ()):
            yield ("sidecars", index, "resources", "requests", resource), resource, value


def check_sidecars(accelerator: Accelerator, stack: NetworkStack | None) -> Iterator[Finding]:
    """Sidecar requests are quantities, and leave room on the node for the training pod."""
    totals = {"cpu": Decimal(0), "memory": Decimal(0)}
    for field, resource, value in _sidecar_requests(accelerator):
        try:
            amount = quantity_value(str(value))
        except ValueError as error:
            yield field, str(error)
            continue
        if resource in totals:
            totals[resource] += amount
    limits = {"cpu": Decimal(repr(accelerator.allocatable.cpus)),
              "memory": quantity_value(accelerator.allocatable.memory)}
    for resource, total in totals.items():
        if total >= limits[resource]:
            yield ("allocatable",), (f"{resource} of {limits[resource]} is not above the "
                                     f"sidecars' requests ({total}): no room for the pod")


def check_network_stack(accelerator: Accelerator, stack: NetworkStack | None) -> Iterator[Finding]:
    """A GPUDirect machine's stack is known, and NCCL's socket traffic (bootstrap, and the
    out-of-band channel of RDMA) goes over the stack's host interfaces, not its GPU NICs."""
    if accelerator.stack is None:
        return
    if stack is None:
        yield ("gpudirect",), f"{accelerator.stack!r} has no entry in network_stacks"
        return
    wanted = ",".join(stack.host_interfaces)
    found = accelerator.env.get("NCCL_SOCKET_IFNAME")
    if found != wanted:
        yield ("env", "NCCL_SOCKET_IFNAME"), (
            f"{found!r}, but the host interfaces of {accelerator.stack} nodes are {wanted}")


ACCELERATOR_RULES: tuple[
    Callable[[Accelerator, NetworkStack | None], Iterator[Finding]], ...
] = (check_machine_gpus, check_sidecars, check_network_stack)


def check_zones(cluster: Cluster, catalog: Catalog) -> Iterator[Finding]:
    for index, zone in enumerate(cluster.zones):
        if not zone.startswith(f"{cluster.region}-"):
            yield ("zones", index), f"{zone!r} is not a zone of the region {cluster.region}"
    for name, pool in cluster.accelerators.items():
        if pool.zone not in cluster.zones:
            yield (("accelerators", name, "zone"),
                   f"{pool.zone!r} is not one of the cluster's zones: {', '.join(cluster.zones)}")


def check_node_pools(cluster: Cluster, catalog: Catalog) -> Iterator[Finding]:
    """One node pool holds one kind of node: no two accelerators (or the heads) share one."""
    owner = {cluster.head_pool.name: "head_pool"}
    for name, pool in cluster.accelerators.items():
        if pool.node_pool in owner:
            yield (("accelerators", name, "node_pool"),
                   f"{pool.node_pool!r} is already the node pool of {owner[pool.node_pool]}")
        owner.setdefault(pool.node_pool, name)


def check_accelerator_pools(cluster: Cluster, catalog: Catalog) -> Iterator[Finding]:
    for name, pool in cluster.accelerators.items():
        accelerator = catalog.accelerators.get(name)
        if accelerator is None:
            known = ", ".join(sorted(catalog.accelerators))
            yield ("accelerators", name), f"unknown accelerator; known: {known}"
        else:
            stack = catalog.network_stack(accelerator)
            yield from _gvnic_network(name, pool, stack)
            yield from _gpu_networks(name, pool, accelerator, stack)
            yield from _distinct_networks(name, pool)


def _gvnic_network(
    name: str, pool: AcceleratorPool, stack: NetworkStack | None
) -> Iterator[Finding]:
    """The gVNIC eth1 of an RDMA machine needs its own network; other machines have none."""
    field = ("accelerators", name, "gvnic_network")
    if stack and stack.gvnic and pool.gvnic_network is None:
        yield field, (f"{name} nodes have a gVNIC eth1 before their GPU NICs: name its "
                      "network (GKE's examples call it gvnic-1)")
    elif not (stack and stack.gvnic) and pool.gvnic_network is not None:
        yield field, f"{name} nodes have no gVNIC besides eth0: drop it"


def _gpu_networks(
    name: str, pool: AcceleratorPool, accelerator: Accelerator, stack: NetworkStack | None
) -> Iterator[Finding]:
    nics = accelerator.gpu_nics
    if len(pool.gpu_networks) != nics:
        first = len(stack.host_interfaces) if stack else 1
        where = f" (eth{first}…eth{first + nics - 1})" if nics else ""
        yield (("accelerators", name, "gpu_networks"),
               f"{name} nodes have {nics} GPU NICs{where}: list exactly {nics} networks")


def _distinct_networks(name: str, pool: AcceleratorPool) -> Iterator[Finding]:
    """Each interface has a network of its own; eth0's `default` is GKE's."""
    networks = [DEFAULT_NETWORK, *pool.node_networks]
    for network in sorted({n for n in networks if networks.count(n) > 1}):
        yield (("accelerators", name),
               f"network {network!r} is named twice: each interface needs its own network "
               f"({DEFAULT_NETWORK!r} is eth0's)")


def check_teams(cluster: Cluster, catalog: Catalog) -> Iterator[Finding]:
    """A team key is a label value (Label.TEAM), and one namespace belongs to one team."""
    owner: dict[str, str] = {}
    for name, team in cluster.teams.items():
        if (problem := label_value_problem(name)) is not None:
            yield ("teams", name), f"a team name becomes a label value: {problem}"
        if team.namespace in owner:
            yield (("teams", name, "namespace"),
                   f"{team.namespace!r} is already the namespace of team {owner[team.namespace]!r}")
        owner.setdefault(team.namespace, name)


def check_head_defaults(cluster: Cluster, catalog: Catalog) -> Iterator[Finding]:
    pool = cluster.head_pool
    defaults, limit = pool.head_defaults, pool.allocatable
    if defaults.cpus > limit.cpus:
        yield (("head_pool", "head_defaults", "cpus"),
               f"{defaults.cpus:g}, but a head node can give at most {limit.cpus:g}")
    if quantity_value(defaults.memory) > quantity_value(limit.memory):
        yield (("head_pool", "head_defaults", "memory"),
               f"{defaults.memory}, but a head node can give at most {limit.memory}")


CLUSTER_RULES: tuple[Callable[[Cluster, Catalog], Iterator[Finding]], ...] = (
    check_zones, check_node_pools, check_accelerator_pools, check_teams, check_head_defaults,
)


def _stack(loaded: Accelerators, accelerator: Accelerator) -> NetworkStack | None:
    return loaded.network_stacks.get(accelerator.stack) if accelerator.stack else None


class Catalog:
    """All catalog files of a repository, loaded lazily and once; contradictions between
    their facts are reported with the file and line (CLUSTER_RULES, ACCELERATOR_RULES)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @cached_property
    def platform(self) -> Platform:
        return load_model(Platform, self.root / "platform/catalog/gke.yaml", self.root)[0]

    @cached_property
    def accelerator_catalog(self) -> Accelerators:
        path = self.root / ACCELERATORS_FILE
        loaded, lines = load_model(Accelerators, path, self.root)
        found = [((("accelerators", name, *field)), message)
                 for name, accelerator in loaded.accelerators.items()
                 for rule in ACCELERATOR_RULES
                 for field, message in rule(accelerator, _stack(loaded, accelerator))]
        if found:
            raise InvalidInput(_located(ACCELERATORS_FILE, lines, found))
        return loaded

    @property
    def accelerators(self) -> dict[str, Accelerator]:
        return self.accelerator_catalog.accelerators

    def network_stack(self, accelerator: Accelerator) -> NetworkStack | None:
        """The NICs and networks of the accelerator's GPUDirect stack; None: it has none."""
        return _stack(self.accelerator_catalog, accelerator)

    @cached_property
    def image_catalog(self) -> Images:
        return load_model(Images, self.root / IMAGES_FILE, self.root)[0]

    @property
    def images(self) -> dict[str, str]:
        return self.image_catalog.images

    @cached_property
    def clusters(self) -> dict[str, Cluster]:
        clusters, problems = {}, self._misnamed_cluster_files()
        for path in sorted((self.root / "clusters").glob("*.yaml")):
            cluster, lines = load_model(Cluster, path, self.root)
            found = [(("name",), f"must equal the file name {path.stem!r}")
                     if cluster.name != path.stem else None]
            found += [finding for rule in CLUSTER_RULES for finding in rule(cluster, self)]
            problems += _located(_display(path, self.root), lines, [f for f in found if f])
            clusters[cluster.name] = cluster
        if problems:
            raise InvalidInput(problems)
        return clusters

    def _misnamed_cluster_files(self) -> list[Problem]:
        """A cluster file that `*.yaml` would miss (`.yml`, `.YAML`) is reported, not ignored."""
        folder = self.root / "clusters"
        paths = sorted(folder.iterdir()) if folder.is_dir() else []
        return [Problem(_display(p, self.root), None, "", "cluster files end in .yaml; "
                        "this one is not read") for p in paths
                if p.suffix.lower() in (".yaml", ".yml") and p.suffix != ".yaml"]

    def load_all(self) -> None:
        """Parse every catalog file now (before forking render workers)."""
        _ = self.platform, self.accelerator_catalog, self.image_catalog, self.clusters

    def files(self) -> list[Path]:
        """Every catalog file, for cache keys and change detection. A file that may not be
        read (a FIFO, a symlink out of the repository) is left out: loading reports it."""
        catalog = sorted((self.root / "platform/catalog").glob("*.yaml"))
        paths = catalog + sorted((self.root / "clusters").glob("*.yaml"))
        return [path for path in paths if refusal(path, self.root) is None]
