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


class Suspect(BaseModel):
    """A node the gate blames, and why; Warden checks it (a suspect, not a definite fault)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    node: str
    """Kubernetes node of the pod."""
    pod: str
    """The job's pod on it (what a retry has replaced)."""
    reason: str
    """What failed there, for a human and for Warden's incident."""


Next = Literal["run", "retry", "teardown"]


class GateRecord(BaseModel):
    """One run of a job's preflight gate over all its worker pods: what the RayJob's
    preflight annotation (Annotation.PREFLIGHT) holds and `gkr status` shows."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    passed: bool
    """Every pod's own checks passed, and the all-reduce between them was exact and fast enough."""
    attempt: int
    """Which run of the gate this is (1 = the first)."""
    attempts: int
    """Runs the job's policy allows."""
    at: str
    """When it ended, RFC 3339 UTC."""
    pods: int
    """Worker pods tested."""
    backend: str
    """torch.distributed backend of the all-reduce: nccl (GPU pods) or gloo."""
    busbw_gbps: float | None = None
    """Bus bandwidth of the all-reduce over every pod, GB/s (None: one rank, or it failed)."""
    min_busbw_gbps: float | None = None
    """The accelerator's threshold, GB/s (None: none, a CPU-only job)."""
    suspects: list[Suspect] = Field(default_factory=list)
    """The nodes blamed; empty when a failure cannot be pinned on fewer than all pods."""
    next: Next
    """What the job does now: run its cmd, retry on replaced pods, or tear itself down."""
    message: str
    """One line for a human."""
