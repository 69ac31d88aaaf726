"""Warden's configuration: one frozen pydantic model, validated when loaded.

Defaults follow NVIDIA's Xid catalogue and DCGM exporter metric names (docs.nvidia.com,
"XID Errors" and dcgm-exporter's default counters); every threshold is configurable.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from runtime.config_errors import config_error
from runtime.errors import ConfigError
from runtime.identity import WARDEN_TEMPORAL_NAMESPACE, Taint
from runtime.pods import PREFLIGHT, CheckSuite, NodeChecks

Severity = Literal["definite", "ambiguous"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TemporalSettings(_Strict):
    """Where Warden's workflows live."""

    address: str = Field("localhost:7233", description="Temporal frontend host:port.")
    namespace: str = Field(WARDEN_TEMPORAL_NAMESPACE,
                           description="Temporal namespace of Warden's workflows.")
    task_queue: str = Field("warden", description="Task queue Warden's workers poll.")
    max_concurrent_activities: int = Field(
        1000, ge=1, description="Activities one worker runs at once, waits included: at least "
        "the nodes that may be in an incident together (the cluster's worst correlated "
        "failure), so that a cordon never queues behind waits (runtime/warden/worker.py).")


class KubernetesSettings(_Strict):
    """How Warden reaches the Kubernetes API."""

    kubeconfig: str | None = Field(None, description="Kubeconfig path; None uses in-cluster.")
    request_timeout_s: float = Field(30.0, gt=0, description="Timeout of one API request.")


class MetricRule(_Strict):
    """A per-node gauge (max over the node's GPUs) and the levels that make it a fault."""

    metric: str = Field(description="DCGM exporter metric name, e.g. DCGM_FI_DEV_GPU_TEMP.")
    ambiguous_at: float | None = Field(None, description="Value from which the check runs.")
    definite_at: float | None = Field(None, description="Value from which Warden cordons.")

    @model_validator(mode="after")
    def _levels(self) -> MetricRule:
        low, high = self.ambiguous_at, self.definite_at
        if low is None and high is None:
            raise ValueError("set ambiguous_at, definite_at or both")
        if low is not None and high is not None and low >= high:
            raise ValueError("ambiguous_at must be below definite_at")
        return self


class XidRule(_Strict):
    """Which Xid codes (last Xid per GPU) are hardware faults; others are application errors."""

    metric: str = Field("DCGM_FI_DEV_XID_ERRORS", description="Metric holding the last Xid.")
    definite: list[int] = Field(
        [48, 64, 79, 95], description="Xids that cordon at once (DBE, remap failure, off bus)."
    )
    ambiguous: list[int] = Field(
        [61, 62, 63, 74, 92, 94, 119, 120], description="Xids that run the node check."
    )


class ConditionRule(_Strict):
    """A node condition whose status means a fault."""

    type: str = Field(description="Node condition type, e.g. Ready or KernelDeadlock.")
    status: Literal["True", "False", "Unknown"] = Field(description="Status meaning a fault.")
    severity: Severity = Field(description="definite cordons; ambiguous runs the check.")


class EventRule(_Strict):
    """A node event reason that means a fault once seen often enough."""

    reason: str = Field(description="Event reason, e.g. KernelOops (node-problem-detector).")
    severity: Severity = Field(description="definite cordons; ambiguous runs the check.")
    min_count: int = Field(1, ge=1, description="Occurrences within the window to count.")


def _default_metrics() -> list[MetricRule]:
    return [
        MetricRule(metric="DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", definite_at=1),
        MetricRule(metric="DCGM_FI_DEV_ROW_REMAP_FAILURE", definite_at=1),
        MetricRule(metric="DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", ambiguous_at=100),
        MetricRule(metric="DCGM_FI_DEV_GPU_TEMP", ambiguous_at=90),
        MetricRule(metric="DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", ambiguous_at=100),
    ]


def _default_conditions() -> list[ConditionRule]:
    return [
        ConditionRule(type="Ready", status="False", severity="ambiguous"),
        ConditionRule(type="Ready", status="Unknown", severity="ambiguous"),
        ConditionRule(type="KernelDeadlock", status="True", severity="definite"),
        ConditionRule(type="ReadonlyFilesystem", status="True", severity="definite"),
    ]


class DetectionConfig(_Strict):
    """The periodic detection sweep."""

    interval_s: float = Field(60.0, gt=0, description="Seconds between detection sweeps.")
    node_selector: str = Field(
        "cloud.google.com/gke-accelerator", description="Label selector of the nodes watched."
    )
    node_label: str = Field("Hostname", description="Metric label that holds the node name.")
    xid: XidRule = Field(default_factory=XidRule, description="Xid classification.")
    metrics: list[MetricRule] = Field(
        default_factory=_default_metrics, description="Gauge thresholds."
    )
    conditions: list[ConditionRule] = Field(
        default_factory=_default_conditions, description="Faulty node conditions."
    )
    events: list[EventRule] = Field(
        default_factory=lambda: [EventRule(reason="KernelOops", severity="ambiguous")],
        description="Faulty node event reasons.",
    )
    events_window_s: float = Field(600.0, gt=0, description="How far back events count.")
    # Finite and at most a year: it is written as an RFC 3339 end and caps what a node's
    # annotation may claim (memory.holdoff_end).
    cleared_holdoff_s: float = Field(
        6 * 3600.0, ge=0, le=366 * 86400.0, allow_inf_nan=False,
        description="After a node check clears a suspect, how long the same ambiguous signals "
        "start no new check (0: every sweep does; at most a year); a new or definite signal "
        "acts at once.")


class MemoryConfig(_Strict):
    """Cordon memory kept in node annotations, and escalation."""

    window_s: float = Field(7 * 86400.0, gt=0, allow_inf_nan=False,
                            description="How long a cordon stays recent.")
    escalate_after: int = Field(3, ge=1, description="Recent cordons that escalate to repair.")


class RecoveryConfig(_Strict):
    """The periodic recovery sweep of cordoned nodes."""

    sweep_interval_s: float = Field(300.0, gt=0, description="Seconds between recovery sweeps.")
    system_namespaces: list[str] = Field(
        ["kube-system", "gke-managed-system", "gmp-system", "warden"],
        description="Namespaces whose pods are not user work.",
    )
    preemptible_priority_classes: list[str] = Field(
        ["gkr-preemptible"],
        description="Priority classes of pods Warden may drain (platform/catalog/gke.yaml).",
    )
    drain_grace_s: float = Field(600.0, ge=0, description="Wait after notifying, before draining.")
    drain_timeout_s: float = Field(1800.0, gt=0, description="Wait for drained pods to leave.")
    reboot_timeout_s: float = Field(1200.0, gt=0, description="Wait for a reboot to finish.")
    repair_timeout_s: float = Field(14400.0, gt=0, description="Wait for a cloud repair.")
    max_attempts: int = Field(2, ge=1, description="Reboot/repair rounds before a human is needed.")
    poll_s: float = Field(10.0, gt=0, description="Polling period while waiting on the cluster.")


class NotifyConfig(_Strict):
    """How drain notices reach owners beyond Kubernetes (Events and the workload annotation).

    The chat webhook's URL comes from the environment (`runtime.identity.Env.WARDEN_WEBHOOK`,
    filled from a Secret), never from this ConfigMap: the URL's path is its credential."""

    webhook_timeout_s: float = Field(10.0, gt=0, description="Timeout of one webhook POST.")


_RUNTIME_IMAGE = "us-docker.pkg.dev/reve-gkr/images/gkr-runtime@sha256:" + "0" * 64


class StressSuite(_Strict):
    """DCGM diagnostics run after a reboot."""

    image: str = Field(
        "nvcr.io/nvidia/cloud-native/dcgm:4.2.3-1-ubuntu22.04", description="DCGM image."
    )
    level: Literal[1, 2, 3, 4] = Field(3, description="dcgmi diag run level (1 quick, 4 long).")
    timeout_s: float = Field(3600.0, gt=0, description="Deadline of the Job.")

    def as_suite(self) -> CheckSuite:
        """The stress test as a generic check suite. `dcgmi` is a client of a DCGM host
        engine and fails without one (DCGM user guide, "Starting the host engine"); the DCGM
        exporter on the node embeds its own and serves no client, so the Job starts one
        (`nv-hostengine` daemonizes, listening on localhost:5555, the port `dcgmi` tries),
        runs the diagnostic, stops the engine (`--term`) and exits with the diagnostic's
        status."""
        script = (f"nv-hostengine && {{ dcgmi diag -r {self.level}; status=$?; "
                  "nv-hostengine --term; exit $status; }")
        return CheckSuite(image=self.image, command=["/bin/sh", "-c", script],
                          timeout_s=self.timeout_s)


class ChecksConfig(NodeChecks):
    """Node checks run as Jobs: the preflight suite and the stress test."""

    namespace: str = Field("warden", description="Namespace of the check Jobs.")
    preflight: CheckSuite = Field(
        CheckSuite(image=_RUNTIME_IMAGE, command=PREFLIGHT),
        description="`gkr check`: the preflight suite.",
    )
    stress: StressSuite = Field(default_factory=StressSuite, description="Stress test.")


class CloudConfig(_Strict):
    """Compute Engine API used to reboot and to report faulty hosts."""

    compute_url: str = Field(
        "https://compute.googleapis.com/compute/v1", description="Compute API base URL."
    )
    metadata_url: str = Field(
        "http://metadata.google.internal/computeMetadata/v1",
        description="Metadata server that issues the Workload Identity token.",
    )
    timeout_s: float = Field(30.0, gt=0, description="Timeout of one API request.")
    fault_behavior: Literal[
        "BEHAVIOR_UNSPECIFIED", "PERFORMANCE", "SILENT_DATA_CORRUPTION", "UNRECOVERABLE_GPU_ERROR"
    ] = Field("UNRECOVERABLE_GPU_ERROR", description="Fault reason sent with a repair request.")


class PrometheusSettings(_Strict):
    """Where DCGM exporter metrics are queried."""

    url: str = Field("http://prometheus.monitoring:9090", description="Prometheus base URL.")
    timeout_s: float = Field(15.0, gt=0, description="Timeout of one query.")


# A label key: an optional DNS-subdomain prefix and a name (kubernetes.io, "Labels and
# Selectors"); taint keys follow the same syntax.
_LABEL_KEY = (
    r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?"  # prefix
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"  # name
)


class ReservationConfig(_Strict):
    """Relaunch reservations: a finished RayJob's former nodes stay its namespace's a while."""

    enabled: bool = Field(True, description="Run the reservation keeper sweep.")
    interval_s: float = Field(60.0, gt=0, description="Seconds between reservation sweeps.")
    taint_key: str = Field(
        Taint.RESERVED_FOR, pattern=_LABEL_KEY,
        description="Taint key whose value is the namespace (runtime.identity).",
    )
    max_reservation_s: float = Field(
        86400.0, gt=0, description="Longest reservation honoured; longer requests are cut to it."
    )


class WardenConfig(_Strict):
    """Everything a Warden worker needs."""

    temporal: TemporalSettings = Field(default_factory=TemporalSettings, description="Temporal.")
    kubernetes: KubernetesSettings = Field(
        default_factory=KubernetesSettings, description="Kubernetes API."
    )
    prometheus: PrometheusSettings = Field(
        default_factory=PrometheusSettings, description="Telemetry source."
    )
    cloud: CloudConfig = Field(default_factory=CloudConfig, description="Cloud repair API.")
    detection: DetectionConfig = Field(default_factory=DetectionConfig, description="Detection.")
    memory: MemoryConfig = Field(default_factory=MemoryConfig, description="Cordon memory.")
    recovery: RecoveryConfig = Field(default_factory=RecoveryConfig, description="Recovery.")
    checks: ChecksConfig = Field(default_factory=ChecksConfig, description="Node checks.")
    reservations: ReservationConfig = Field(
        default_factory=ReservationConfig, description="Relaunch reservations."
    )
    notify: NotifyConfig = Field(default_factory=NotifyConfig, description="Drain notices.")
    activity_timeout_s: float = Field(120.0, gt=0, description="Timeout of short activities.")
    heartbeat_s: float = Field(30.0, gt=0, description="Heartbeat timeout of long activities.")
    liveness_file: str | None = Field(
        None, description="File the worker touches every 10 s for the liveness probe."
    )
    sweep_iterations: int = Field(
        100, ge=1, description="Sweeps before a sweep workflow continues as new."
    )

    @model_validator(mode="after")
    def _webhook_inside_activity(self) -> WardenConfig:
        # The webhook is posted within the notify activity: one that hangs must fail before the
        # activity times out, or every retry would post the Events and annotations again.
        if self.notify.webhook_timeout_s >= self.activity_timeout_s:
            raise ValueError("notify.webhook_timeout_s must be below activity_timeout_s")
        return self


def parse_config(data: object, source: str = "config") -> WardenConfig:
    """Validate raw data; every error names its field path and what is allowed."""
    try:
        return WardenConfig.model_validate(data or {})
    except ValidationError as error:
        raise config_error(error, source, WardenConfig) from error


def load_config(path: Path) -> WardenConfig:
    """Read a YAML file (the ConfigMap) into a validated config."""
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as error:
        raise ConfigError("", str(error), str(path)) from error
    return parse_config(data, str(path))
