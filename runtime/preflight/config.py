"""What the preflight expects of a pod, and how it runs (`PreflightConfig`); and the settings
of the gate before a RayJob's cmd (`GateConfig`, runtime.preflight.gate).

The expectations are rendered by `gkr` from the accelerator catalog and reach the pod as data:
the JSON of this model in the GKR_PREFLIGHT environment variable or in a file given with
`--expect` (the gate's in GKR_PREFLIGHT_GATE). The runtime never reads the catalog itself.
Pydantic only: `gkr render` validates the gate's settings with this very model.
"""

from __future__ import annotations

import json
import os
import socket
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from runtime.config_errors import config_error
from runtime.errors import ConfigError
from runtime.identity import Env

ENV_VAR = Env.PREFLIGHT
CheckName = Literal["kernel", "libraries", "transport", "mounts", "compute", "collective"]
ALL_CHECKS: tuple[CheckName, ...] = (
    "kernel", "libraries", "transport", "mounts", "compute", "collective",
)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class MountExpectation(_Model):
    """A shared mount the job depends on."""

    path: str = Field(pattern=r"^/")
    """Absolute path of the mount point in the pod."""
    filesystem: str | None = None
    """Expected filesystem type as /proc/mounts names it (tmpfs, nfs4, fuse.gcsfuse, …)."""
    writable: bool = True
    """The job writes there: the preflight writes and removes a probe file."""


class PreflightConfig(_Model):
    """Expectations of one pod and the settings of the tests."""

    node: str = Field(default_factory=lambda: os.environ.get("NODE_NAME", socket.gethostname()))
    """Node name reported in the result (default: $NODE_NAME, else the host name)."""
    gpus: int = Field(0, ge=0)
    """GPUs the pod must see (0: a CPU-only pod; no driver or NCCL library needed)."""
    transport_env: dict[str, str] = Field(default_factory=dict)
    """NCCL and transport variables, with the values the accelerator catalog gives them."""
    plugin_paths: list[str] = Field(default_factory=list)
    """Library directories that must exist and hold shared libraries (NCCL net plugins)."""
    mounts: list[MountExpectation] = Field(default_factory=list)
    """Shared mounts to verify."""
    kernel_log: str | None = None
    """Read this file instead of the live kernel log (recorded samples, tests)."""
    checks: list[CheckName] = Field(default_factory=lambda: list(ALL_CHECKS))
    """Checks to run, in this order."""
    compute_size: int = Field(256, ge=8, le=16384)
    """Matrix size of the compute test."""
    collective_world: int = Field(0, ge=0, le=64)
    """Processes of the collective test (0: one per GPU, or 2 on a CPU-only pod)."""
    collective_mib: float = Field(8.0, gt=0, le=4096)
    """Size of each all_reduce / all_gather buffer, in MiB."""
    collective_timeout_s: float = Field(120.0, gt=0)
    """Seconds the collective test may take before it is reported as hung."""

    @property
    def world_size(self) -> int:
        return self.collective_world or self.gpus or 2


def load_config(text: str | None, source: str, **overrides: object) -> PreflightConfig:
    """A config from JSON text (None: defaults); errors name the source and field path."""
    try:
        data = json.loads(text) if text else {}
    except json.JSONDecodeError as error:
        raise ConfigError("", f"not JSON: {error}", source) from None
    if not isinstance(data, dict):
        raise ConfigError("", "expected a JSON object", source)
    data |= {key: value for key, value in overrides.items() if value is not None}
    try:
        return PreflightConfig.model_validate(data)
    except ValidationError as error:
        raise config_error(error, source, PreflightConfig) from None


class GatePolicy(_Model):
    """What a failed preflight leads to (the spec's `preflight` section)."""

    on_failure: Literal["retry", "teardown"] = "teardown"
    """retry: the blamed pods are replaced and the gate runs again; teardown: the job fails."""
    attempts: int = Field(1, ge=1, le=10)
    """Runs of the gate at most, the first included."""
    replacement_timeout_s: float = Field(1800.0, gt=0)
    """How long a retry waits for the replaced pods to join."""


class GateConfig(_Model):
    """The gate's settings, rendered by `gkr` into the head pod (GKR_PREFLIGHT_GATE, JSON)."""

    pods: int = Field(ge=1, le=4096)
    """Worker pods the job runs (spec `pods`)."""
    checks: PreflightConfig = Field(default_factory=PreflightConfig)
    """What each worker pod must offer (from the accelerator catalog)."""
    min_busbw_gbps: float | None = Field(None, gt=0, allow_inf_nan=False)
    """The accelerator's all-reduce bus-bandwidth threshold, GB/s (None: no threshold)."""
    message_mib: float = Field(8.0, gt=0, le=4096)
    """All-reduce buffer, MiB (the catalog's, for the threshold holds at that size)."""
    iterations: int = Field(5, ge=1, le=1000)
    """Timed all-reduces per measurement."""
    group: str = "workers"
    """The KubeRay worker group of the pods (where replacements are asked for)."""
    warden_task_queue: str = Field("warden", min_length=1)
    """Warden's Temporal task queue (the add-on catalog's)."""
    start_timeout_s: float = Field(900.0, gt=0)
    """How long the first attempt waits for every pod to join."""
    timeout_s: float = Field(600.0, gt=0)
    """How long one attempt may take once the pods are there."""
    policy: GatePolicy = Field(default_factory=GatePolicy)
    """On failure."""

    @property
    def ranks_per_pod(self) -> int:
        return self.checks.gpus or 1

    @property
    def backend(self) -> Literal["nccl", "gloo"]:
        return "nccl" if self.checks.gpus else "gloo"

    @property
    def pod_checks(self) -> PreflightConfig:
        """Each pod's own checks; its GPUs' collective is part of the all-reduce between pods."""
        return self.checks.model_copy(
            update={"checks": [c for c in self.checks.checks if c != "collective"]})


def load_gate(text: str | None, source: str = f"${Env.PREFLIGHT_GATE}") -> GateConfig:
    """The settings from JSON; errors name the source and the field path."""
    if not text:
        raise ConfigError("", "not set: the RayJob was rendered without its gate", source)
    try:
        return GateConfig.model_validate_json(text)
    except ValidationError as error:
        raise config_error(error, source, GateConfig) from None
