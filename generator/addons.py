"""The add-on catalog, platform/catalog/addons.yaml: chart versions, Argo CD, Kueue and
provisioning facts that vary by platform, never by job."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from generator.catalog import DNS_LABEL, GpuStack, load_model

ADDONS_FILE = "platform/catalog/addons.yaml"
Wave = Literal["controllers", "observability", "config", "jobs", "services"]
# The Helm values of the Fluent Bit add-on that generator.platform.telemetry renders.
SHIPPER_VALUES = frozenset({"affinity", "config", "env", "extraVolumes", "extraVolumeMounts"})
Stack = GpuStack


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class ArgoCd(_Model):
    namespace: str = Field(pattern=DNS_LABEL)
    """Namespace Argo CD runs in (Applications live there)."""
    project: str
    """Argo CD project of every generated Application."""
    repo_url: str
    """Git URL of this repository, as Argo CD reads it."""
    target_revision: str
    """Branch or tag Argo CD syncs."""
    waves: dict[Wave, int]
    """Sync wave of each reconciliation stage (lower syncs first)."""


class Service(_Model):
    name: str = Field(pattern=DNS_LABEL)
    """Name of a Service the chart creates (charts derive it from the release name)."""
    port: int = Field(ge=1, le=65535)
    """Its port."""


class Addon(_Model):
    description: str
    """What the add-on is for, for humans."""
    repo_url: str
    """Helm repository URL, or oci://… for an OCI chart (then `chart` is omitted)."""
    chart: str | None = None
    """Chart name in a classic Helm repository."""
    version: str = Field(pattern=r"^\d+\.\d+\.\d+$")
    """Pinned chart version (exact, never a range)."""
    namespace: str = Field(pattern=DNS_LABEL)
    """Namespace the chart installs into."""
    wave: Wave
    """Reconciliation stage of the add-on."""
    values: dict[str, Any]
    """Helm values."""
    gpu_tolerations: str | None = None
    """Top-level Helm value `gkr render` fills with the tolerations of the cluster's GPU nodes
    (each accelerator's taints and the reservation taint), for add-ons that run on them."""
    services: dict[str, Service] = {}
    """Services other platform parts reach, by role (e.g. `frontend`)."""
    ships_nccl_inspector: bool = False
    """A Fluent Bit chart whose config, env, volumes and affinity `gkr render` fills so that
    it ships the GPU jobs' NCCL Inspector dumps into ClickHouse (generator.platform.telemetry)."""
    monitor_labels: str | None = None
    """Dotted Helm value holding the labels of the chart's ServiceMonitor (dcgm-exporter:
    `serviceMonitor.additionalLabels`), which `gkr render` fills with the labels the
    platform's Prometheus selects monitors by (generator.platform.monitoring)."""

    @model_validator(mode="after")
    def _source(self) -> Addon:
        if self.repo_url.startswith("oci://") == (self.chart is not None):
            raise ValueError("give `chart` for a Helm repository, omit it for an oci:// chart")
        if self.gpu_tolerations in self.values:
            raise ValueError(f"values.{self.gpu_tolerations} is rendered (gpu_tolerations); "
                             "remove it from values")
        if self.monitor_labels is not None and _has_path(self.values, self.monitor_labels):
            raise ValueError(f"values.{self.monitor_labels} is rendered (monitor_labels); "
                             "remove it from values")
        rendered = sorted(SHIPPER_VALUES & set(self.values)) if self.ships_nccl_inspector else []
        if rendered:
            raise ValueError(f"values.{', values.'.join(rendered)} are rendered "
                             "(ships_nccl_inspector); remove them from values")
        return self

    def prometheus_spec(self) -> dict[str, Any]:
        """kube-prometheus-stack's `prometheus.prometheusSpec` values (empty when unset)."""
        return dict(self.values.get("prometheus", {}).get("prometheusSpec", {}))

    def address(self, role: str) -> str:
        """host:port of the Service `role`, from any namespace of the cluster."""
        service = self.services[role]
        return f"{service.name}.{self.namespace}:{service.port}"


def _has_path(values: dict[str, Any], dotted: str) -> bool:
    for key in dotted.split("."):
        if not isinstance(values, dict) or key not in values:
            return False
        values = values[key]
    return True


class ServiceRef(_Model):
    addon: str
    """Add-on (a key of `addons`) that runs the service."""
    service: str
    """Role of the Service within that add-on (a key of its `services`)."""


class WardenFacts(_Model):
    prometheus: ServiceRef
    """The Prometheus that scrapes the DCGM exporter."""
    temporal: ServiceRef
    """The Temporal frontend that runs Warden's workflows."""
    settings: dict[str, Any]
    """Warden's config (runtime/warden/config.py, WardenConfig) but for what `gkr render`
    fills in from other sources; checked against WardenConfig at render time."""


class Namespaces(_Model):
    system: str = Field(pattern=DNS_LABEL)
    """Namespace of GKR's own cluster services (image pre-cache)."""
    system_pod_security: str
    """Pod Security Admission level enforced in that namespace."""
    pod_security: dict[Literal["enforce", "audit", "warn"], str]
    """Pod Security Admission levels of team namespaces."""


class Kueue(_Model):
    cluster_queue: str = Field(pattern=DNS_LABEL)
    """Name of the ClusterQueue every LocalQueue points at."""
    unbounded_quota: str
    """Quota of CPUs and GPUs per flavor: far above capacity, so Kueue admits all jobs."""
    unbounded_memory: str
    """Memory quota per flavor, likewise unbounded."""


class Precache(_Model):
    name: str = Field(pattern=DNS_LABEL)
    """Name of the image pre-cache DaemonSet."""
    keep_alive_image: str
    """Friendly image name (images.yaml) of the container that keeps the pod running."""
    keep_alive_command: list[str]
    """Command of that container."""
    warm_command: list[str]
    """Command run once in each cached image (it only has to start)."""


class NcclInstaller(_Model):
    image: str
    """Installer image GKE publishes for the stack: a name in platform/catalog/images.yaml."""
    command: list[str]
    """Installer command; copies the plugin to `mount_path`."""
    host_path: str
    """Host directory the plugin lands in (the one jobs mount)."""
    mount_path: str
    """Where the installer sees that host directory."""


class TerraformFacts(_Model):
    state_bucket: str
    """GCS bucket holding Terraform state (one prefix per root)."""
    google_provider: str
    """Version constraint of the google provider."""
    terraform_version: str
    """Required Terraform version."""
    release_channel: Literal["RAPID", "REGULAR", "STABLE"]
    """GKE release channel."""
    node_cidr: str
    """Primary range of each cluster's node subnet."""
    pod_cidr: str
    """Secondary range for pods."""
    service_cidr: str
    """Secondary range for services."""
    master_cidr: str
    """/28 of the private control plane."""
    gpu_cidr: str
    """Range the GPU NIC subnets are carved from (a /24 each)."""
    admin_cidrs: list[str] = Field(min_length=1)
    """Networks allowed to reach the control plane."""
    rbac_security_group: str
    """The gke-security-groups@<domain> group that team groups are nested in."""
    checkpoint_retention_days: int = Field(gt=0)
    """Days noncurrent checkpoint object versions are kept."""


class Addons(_Model):
    """Everything in platform/catalog/addons.yaml."""

    argocd: ArgoCd
    """Argo CD settings."""
    addons: dict[str, Addon]
    """Cluster add-ons installed from Helm charts, by Application name."""
    namespaces: Namespaces
    """Namespace settings."""
    kueue: Kueue
    """Kueue objects of each cluster."""
    precache: Precache
    """The image pre-cache DaemonSet."""
    nccl_installers: dict[Stack, NcclInstaller]
    """NCCL plugin installer per GPUDirect stack."""
    pause_image: str
    """Image of the idle container of installer DaemonSets: a name in images.yaml."""
    terraform: TerraformFacts
    """Provisioning facts shared by every cluster root."""
    warden: WardenFacts
    """Warden: the add-on services it uses, and its settings."""

    @model_validator(mode="after")
    def _one_shipper(self) -> Addons:
        shippers = sorted(name for name, a in self.addons.items() if a.ships_nccl_inspector)
        if len(shippers) > 1:
            raise ValueError(f"addons: only one add-on may ship NCCL Inspector dumps; "
                             f"ships_nccl_inspector is set on {', '.join(shippers)}")
        return self

    @model_validator(mode="after")
    def _warden_services_exist(self) -> Addons:
        for field, ref in (("prometheus", self.warden.prometheus),
                           ("temporal", self.warden.temporal)):
            addon = self.addons.get(ref.addon)
            if addon is None or ref.service not in addon.services:
                known = [f"{name}/{role}" for name, a in sorted(self.addons.items())
                         for role in sorted(a.services)]
                raise ValueError(f"warden.{field}: {ref.addon}/{ref.service} is no add-on "
                                 f"service; known: {', '.join(known) or 'none'}")
        return self

    @model_validator(mode="after")
    def _monitors_selectable(self) -> Addons:
        prometheus = self.addons.get(self.warden.prometheus.addon)
        spec = prometheus.prometheus_spec() if prometheus else {}
        if any(a.monitor_labels for a in self.addons.values()) and \
                (spec.get("serviceMonitorSelector") or {}).get("matchExpressions"):
            raise ValueError(
                f"addons.{self.warden.prometheus.addon}.values.prometheus.prometheusSpec."
                "serviceMonitorSelector: matchExpressions cannot be met by the labels "
                "gkr render gives monitors (monitor_labels); select by matchLabels")
        return self

    def address(self, ref: ServiceRef) -> str:
        """host:port of the add-on service `ref` names."""
        return self.addons[ref.addon].address(ref.service)


def load_addons(root: Path) -> Addons:
    """The add-on catalog of a repository (errors name the file, line and field)."""
    return load_model(Addons, root / ADDONS_FILE, root)[0]
