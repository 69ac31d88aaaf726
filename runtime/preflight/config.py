"""What the preflight expects of a pod, and how it runs (`PreflightConfig`).

The expectations are rendered by `gkr` from the accelerator catalog and reach the pod as data:
the JSON of this model in the GKR_PREFLIGHT environment variable or in a file given with
`--expect`. The runtime never reads the catalog itself.
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
