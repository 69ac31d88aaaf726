"""The add-on catalog, platform/catalog/addons.yaml: chart versions, Argo CD, Kueue and
provisioning facts that vary by platform, never by job."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from generator.catalog import DNS_LABEL, GpuStack, load_model
from generator.errors import InvalidInput, Problem
from generator.schemas.chartvalues import contract
from generator.yamlio import LineMap, line_of

ADDONS_FILE = "platform/catalog/addons.yaml"
Wave = Literal["controllers", "observability", "config", "jobs", "services"]
# The Helm values of the Fluent Bit add-on that generator.platform.telemetry renders.
SHIPPER_VALUES = frozenset({"affinity", "config", "env", "extraVolumes", "extraVolumeMounts"})
# kube-prometheus-stack's list of extra PodMonitors (values.yaml, prometheus.
# additionalPodMonitors), which generator.platform.monitoring renders from `pod_monitors`.
POD_MONITORS_VALUE = "prometheus.additionalPodMonitors"
# The grafana chart's provisioning values (values.yaml: datasources, dashboardProviders,
# dashboards, envValueFrom) that generator.platform.grafana renders from `grafana`.
GRAFANA_VALUES = frozenset({"datasources", "dashboardProviders", "dashboards", "envValueFrom"})
CLICKHOUSE_PLUGIN = "grafana-clickhouse-datasource"  # the Grafana plugin's id
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


class PodMonitor(_Model):
    role: Literal["head", "worker"]
    """Ray pod role (runtime.identity Role, the Label.ROLE label) whose pods it scrapes, in
    every team namespace of the cluster."""
    port: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=15)
    """Name of the container port it scrapes (a port generator.pods gives that role)."""
    interval: str | None = Field(None, pattern=r"^\d+[smh]$")
    """Scrape interval; none: the Prometheus default."""


class DataSource(_Model):
    name: str
    """The data source's name in Grafana."""
    uid: str = Field(pattern=r"^[-_a-zA-Z0-9]{1,40}$")
    """Its uid, which `gkr render` writes into the dashboards' references to it."""


class GrafanaProvisioning(_Model):
    prometheus: DataSource
    """The platform's Prometheus (warden.prometheus) as a data source."""
    clickhouse: DataSource
    """The cluster's telemetry store (gke.yaml telemetry), read as its reader user."""
    clickhouse_plugin: str = Field(pattern=r"^\d+\.\d+\.\d+$")
    """Pinned version of the grafana-clickhouse-datasource plugin Grafana installs."""
    folder: str
    """Grafana folder holding GKR's dashboards."""
    dashboards: dict[str, str] = Field(min_length=1)
    """Dashboard name → its JSON file in the repository (platform/catalog/dashboards/), whose
    data source references name a type (`prometheus`, `grafana-clickhouse-datasource`)."""


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
    pod_monitors: dict[str, PodMonitor] = {}
    """PodMonitors `gkr render` adds to this Prometheus (kube-prometheus-stack's
    prometheus.additionalPodMonitors), by name; only on the add-on of warden.prometheus."""
    grafana: GrafanaProvisioning | None = None
    """A Grafana chart whose data sources and dashboards `gkr render` provisions
    (generator.platform.grafana)."""

    @property
    def chart_name(self) -> str:
        """The chart's name: `chart`, or the last part of an oci:// URL."""
        return self.chart or self.repo_url.rstrip("/").rsplit("/", 1)[-1]

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
        return self

    @model_validator(mode="after")
    def _rendered_values_left_out(self) -> Addon:
        owners = (("ships_nccl_inspector", SHIPPER_VALUES if self.ships_nccl_inspector else ()),
                  ("grafana", GRAFANA_VALUES if self.grafana else ()))
        for field, owned in owners:
            rendered = sorted(set(owned) & set(self.values))
            if rendered:
                raise ValueError(f"values.{', values.'.join(rendered)} are rendered "
                                 f"({field}); remove them from values")
        if self.pod_monitors and _has_path(self.values, POD_MONITORS_VALUE):
            raise ValueError(f"values.{POD_MONITORS_VALUE} is rendered (pod_monitors); "
                             "remove it from values")
        plugins = self.values.get("plugins") if self.grafana else None
        if isinstance(plugins, list) and any(
                str(p).split(" ")[0].endswith(CLICKHOUSE_PLUGIN) for p in plugins):
            raise ValueError(f"values.plugins: {CLICKHOUSE_PLUGIN} is installed at "
                             "grafana.clickhouse_plugin; remove it from values.plugins")
        return self

    def value_problems(self, name: str, lines: LineMap) -> list[Problem]:
        """The values the pinned chart does not take (generator.schemas.chartvalues); none
        when its contract is not vendored."""
        chart = contract(self.chart_name, self.version)
        found = chart.problems(self.values) if chart else []
        return [Problem(ADDONS_FILE, line_of(lines, ("addons", name, "values", *p.path)),
                        f"addons.{name}.values.{p.dotted}", p.message) for p in found]

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
        wanted = (("serviceMonitorSelector", any(a.monitor_labels for a in self.addons.values())),
                  ("podMonitorSelector", bool(prometheus and prometheus.pod_monitors)))
        for selector, rendered in wanted:
            if rendered and (spec.get(selector) or {}).get("matchExpressions"):
                raise ValueError(
                    f"addons.{self.warden.prometheus.addon}.values.prometheus.prometheusSpec."
                    f"{selector}: matchExpressions cannot be met by the labels gkr render "
                    "gives monitors; select by matchLabels")
        return self

    @model_validator(mode="after")
    def _pod_monitors_on_the_prometheus(self) -> Addons:
        elsewhere = sorted(name for name, a in self.addons.items()
                           if a.pod_monitors and name != self.warden.prometheus.addon)
        if elsewhere:
            raise ValueError(f"addons.{elsewhere[0]}.pod_monitors: only the platform's "
                             f"Prometheus (warden.prometheus: {self.warden.prometheus.addon}) "
                             "takes pod_monitors")
        return self

    def address(self, ref: ServiceRef) -> str:
        """host:port of the add-on service `ref` names."""
        return self.addons[ref.addon].address(ref.service)


def load_addons(root: Path) -> Addons:
    """The add-on catalog of a repository (errors name the file, line and field), its Helm
    values checked against each pinned chart's vendored defaults and schema."""
    addons, lines = load_model(Addons, root / ADDONS_FILE, root)
    problems = [p for name, addon in addons.addons.items()
                for p in addon.value_problems(name, lines)]
    if problems:
        raise InvalidInput(problems)
    return addons
