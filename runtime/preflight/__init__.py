"""The preflight suite (seed §2.4): checks a placed pod before a long job burns GPU hours.

`python -m runtime.preflight` runs it in a pod and prints one JSON `PreflightResult`.
"""

from runtime.preflight.config import ALL_CHECKS, ENV_VAR, MountExpectation, PreflightConfig
from runtime.preflight.result import Finding, PreflightResult
from runtime.preflight.suite import run_suite

__all__ = [
    "ALL_CHECKS", "ENV_VAR", "Finding", "MountExpectation", "PreflightConfig", "PreflightResult",
    "run_suite",
]
