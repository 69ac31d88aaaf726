"""The structured result of a preflight: one JSON object per pod, read by `gkr` and Warden."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Severity = Literal["ok", "warning", "error"]


class Finding(BaseModel):
    """One observation of one check."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    check: str
    """The check that made it (kernel, libraries, transport, mounts, compute, collective)."""
    severity: Severity
    """ok (passed), warning (reported only) or error (the pod or its node is suspect)."""
    message: str
    """What was seen, for a human."""
    category: str | None = None
    """Fault class of a kernel-log finding (gpu, ecc, nvlink, pcie, driver, memory, oom)."""


class PreflightResult(BaseModel):
    """Everything one pod's preflight found; `passed` is False when any finding is an error."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    node: str
    """Node the pod ran on."""
    passed: bool
    """No finding has severity error."""
    findings: list[Finding]
    """Every finding, in check order."""
    figures: dict[str, float] = Field(default_factory=dict)
    """Measured figures (GFLOP/s, bus bandwidth in GB/s, seconds)."""

    @classmethod
    def of(cls, node: str, findings: list[Finding], figures: dict[str, float]) -> PreflightResult:
        passed = not any(f.severity == "error" for f in findings)
        return cls(node=node, passed=passed, findings=findings, figures=figures)
