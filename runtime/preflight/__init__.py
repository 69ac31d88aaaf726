"""The preflight suite (seed §2.4): checks a placed pod before a long job burns GPU hours,
and the gate that runs it on every pod of a RayJob before its cmd (runtime.preflight.gate).

`python -m runtime.preflight` runs it in a pod and prints one JSON `PreflightResult`.
The settings and results are plain pydantic models; the suite itself (torch) is imported
when first used, so that `gkr render`, which validates the gate's settings, stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from runtime.preflight.config import (
    ALL_CHECKS,
    ENV_VAR,
    GateConfig,
    GatePolicy,
    MountExpectation,
    PreflightConfig,
)
from runtime.preflight.result import Finding, GateRecord, PreflightResult, Suspect

if TYPE_CHECKING:
    from runtime.preflight.suite import run_suite

__all__ = [
    "ALL_CHECKS", "ENV_VAR", "Finding", "GateConfig", "GatePolicy", "GateRecord",
    "MountExpectation", "PreflightConfig", "PreflightResult", "Suspect", "run_suite",
]


def __getattr__(name: str) -> Any:
    if name == "run_suite":
        from runtime.preflight.suite import run_suite

        return run_suite
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
